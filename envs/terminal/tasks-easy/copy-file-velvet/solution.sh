cp velvet.txt backup.txt
