echo maple >> notes.txt
