cp orbit.txt backup.txt
