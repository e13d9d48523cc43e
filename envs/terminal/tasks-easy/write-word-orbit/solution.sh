echo orbit > answer.txt
