echo maple
