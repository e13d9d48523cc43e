rm apple.txt
