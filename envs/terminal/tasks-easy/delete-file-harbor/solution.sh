rm harbor.txt
