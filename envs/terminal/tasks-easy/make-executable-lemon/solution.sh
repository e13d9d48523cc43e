chmod +x lemon.sh
