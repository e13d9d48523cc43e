mv velvet.txt done.txt
