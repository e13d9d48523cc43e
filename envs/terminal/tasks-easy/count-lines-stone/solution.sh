wc -l < stone.txt > count.txt
