rm lemon.txt
