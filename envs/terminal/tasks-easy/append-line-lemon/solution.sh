echo lemon >> notes.txt
