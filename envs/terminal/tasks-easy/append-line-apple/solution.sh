echo apple >> notes.txt
