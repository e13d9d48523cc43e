chmod +x cloud.sh
