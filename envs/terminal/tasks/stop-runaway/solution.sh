ps -eo pid,args | grep '[n]oisy.sh'
pkill -f 'bin/noisy\.sh'
sleep 0.5
: > logs/noise.log
ls -l logs
