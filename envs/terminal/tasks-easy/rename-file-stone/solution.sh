mv stone.txt done.txt
