mv harbor.txt done.txt
