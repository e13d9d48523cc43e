cp apple.txt backup.txt
