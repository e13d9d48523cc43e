cp maple.txt backup.txt
