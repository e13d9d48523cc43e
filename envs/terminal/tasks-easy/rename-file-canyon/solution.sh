mv canyon.txt done.txt
