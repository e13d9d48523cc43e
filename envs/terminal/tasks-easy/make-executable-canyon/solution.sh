chmod +x canyon.sh
