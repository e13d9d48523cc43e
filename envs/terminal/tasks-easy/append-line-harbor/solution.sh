echo harbor >> notes.txt
