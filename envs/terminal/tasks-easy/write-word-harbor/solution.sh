echo harbor > answer.txt
