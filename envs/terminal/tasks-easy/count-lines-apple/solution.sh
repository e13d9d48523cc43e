wc -l < apple.txt > count.txt
