chmod +x maple.sh
