rm stone.txt
