wc -l < orbit.txt > count.txt
