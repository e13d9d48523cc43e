echo velvet >> notes.txt
