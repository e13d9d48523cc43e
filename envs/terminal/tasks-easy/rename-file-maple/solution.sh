mv maple.txt done.txt
