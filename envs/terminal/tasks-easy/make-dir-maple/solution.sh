mkdir maple
