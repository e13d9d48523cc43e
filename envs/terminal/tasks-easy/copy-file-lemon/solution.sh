cp lemon.txt backup.txt
