echo maple > answer.txt
