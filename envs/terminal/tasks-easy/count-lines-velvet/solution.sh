wc -l < velvet.txt > count.txt
