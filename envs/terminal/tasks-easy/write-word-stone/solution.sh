echo stone > answer.txt
