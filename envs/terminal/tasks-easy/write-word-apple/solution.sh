echo apple > answer.txt
