mv orbit.txt done.txt
