mkdir velvet
