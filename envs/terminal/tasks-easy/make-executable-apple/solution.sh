chmod +x apple.sh
