mkdir piano
