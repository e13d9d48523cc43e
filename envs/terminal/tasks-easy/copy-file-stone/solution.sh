cp stone.txt backup.txt
