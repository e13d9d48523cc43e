chmod +x piano.sh
