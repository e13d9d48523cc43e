echo canyon > answer.txt
