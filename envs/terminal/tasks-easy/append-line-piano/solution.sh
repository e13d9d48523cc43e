echo piano >> notes.txt
