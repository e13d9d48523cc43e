mv tiger.txt done.txt
