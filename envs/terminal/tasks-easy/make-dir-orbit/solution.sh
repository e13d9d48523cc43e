mkdir orbit
