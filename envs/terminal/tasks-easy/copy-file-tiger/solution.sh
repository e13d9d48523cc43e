cp tiger.txt backup.txt
