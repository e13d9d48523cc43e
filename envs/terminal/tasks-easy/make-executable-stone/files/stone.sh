echo stone
