rm tiger.txt
