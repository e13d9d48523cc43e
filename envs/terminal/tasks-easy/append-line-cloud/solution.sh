echo cloud >> notes.txt
