echo velvet > answer.txt
