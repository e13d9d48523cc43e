mkdir lemon
