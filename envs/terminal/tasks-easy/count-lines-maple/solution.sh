wc -l < maple.txt > count.txt
