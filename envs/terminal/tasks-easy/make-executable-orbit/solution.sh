chmod +x orbit.sh
