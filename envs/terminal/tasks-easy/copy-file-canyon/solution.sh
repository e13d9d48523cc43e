cp canyon.txt backup.txt
