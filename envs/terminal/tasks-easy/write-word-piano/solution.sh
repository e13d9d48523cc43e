echo piano > answer.txt
