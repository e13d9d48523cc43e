wc -l < harbor.txt > count.txt
