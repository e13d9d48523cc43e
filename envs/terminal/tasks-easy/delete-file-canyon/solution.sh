rm canyon.txt
