wc -l < piano.txt > count.txt
