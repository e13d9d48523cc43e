chmod +x velvet.sh
