echo lemon
