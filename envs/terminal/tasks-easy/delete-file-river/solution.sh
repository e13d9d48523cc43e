rm river.txt
