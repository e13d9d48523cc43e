wc -l < lemon.txt > count.txt
