echo river > answer.txt
