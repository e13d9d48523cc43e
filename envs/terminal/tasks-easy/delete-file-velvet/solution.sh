rm velvet.txt
