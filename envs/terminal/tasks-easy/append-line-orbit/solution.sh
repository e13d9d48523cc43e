echo orbit >> notes.txt
