cp river.txt backup.txt
