echo orbit
