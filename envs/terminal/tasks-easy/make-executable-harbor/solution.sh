chmod +x harbor.sh
