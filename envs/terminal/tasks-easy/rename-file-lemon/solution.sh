mv lemon.txt done.txt
