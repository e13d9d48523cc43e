wc -l < cloud.txt > count.txt
