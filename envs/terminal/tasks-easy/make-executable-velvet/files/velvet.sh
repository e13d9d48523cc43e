echo velvet
