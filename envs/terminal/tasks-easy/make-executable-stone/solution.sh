chmod +x stone.sh
