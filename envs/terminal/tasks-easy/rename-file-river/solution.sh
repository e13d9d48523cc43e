mv river.txt done.txt
