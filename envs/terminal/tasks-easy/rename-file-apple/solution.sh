mv apple.txt done.txt
