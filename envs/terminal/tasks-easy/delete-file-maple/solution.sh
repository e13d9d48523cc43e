rm maple.txt
