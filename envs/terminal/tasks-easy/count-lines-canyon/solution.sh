wc -l < canyon.txt > count.txt
