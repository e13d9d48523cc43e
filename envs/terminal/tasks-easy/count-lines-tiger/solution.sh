wc -l < tiger.txt > count.txt
