echo tiger >> notes.txt
