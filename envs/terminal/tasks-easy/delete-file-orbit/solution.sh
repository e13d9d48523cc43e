rm orbit.txt
