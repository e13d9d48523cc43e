mv cloud.txt done.txt
