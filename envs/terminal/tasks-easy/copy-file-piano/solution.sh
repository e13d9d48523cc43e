cp piano.txt backup.txt
