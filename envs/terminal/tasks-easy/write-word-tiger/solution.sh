echo tiger > answer.txt
