echo cloud > answer.txt
