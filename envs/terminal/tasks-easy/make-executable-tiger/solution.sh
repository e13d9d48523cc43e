chmod +x tiger.sh
