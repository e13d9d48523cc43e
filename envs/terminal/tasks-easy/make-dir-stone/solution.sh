mkdir stone
