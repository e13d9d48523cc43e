wc -l < river.txt > count.txt
