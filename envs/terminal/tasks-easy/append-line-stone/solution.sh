echo stone >> notes.txt
