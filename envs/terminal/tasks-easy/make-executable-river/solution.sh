chmod +x river.sh
