echo lemon > answer.txt
