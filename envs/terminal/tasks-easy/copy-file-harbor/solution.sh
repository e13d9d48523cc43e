cp harbor.txt backup.txt
