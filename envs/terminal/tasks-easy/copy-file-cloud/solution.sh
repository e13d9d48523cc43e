cp cloud.txt backup.txt
