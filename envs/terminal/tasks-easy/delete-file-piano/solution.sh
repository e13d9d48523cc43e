rm piano.txt
