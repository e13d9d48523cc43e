echo river >> notes.txt
