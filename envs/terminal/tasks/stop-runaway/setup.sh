# Two daemons: one fills the disk with noise, the other is a heartbeat that must keep running.
set -e
mkdir -p bin logs
cat > bin/noisy.sh <<'SH'
#!/bin/bash
while true; do echo "$(date +%s.%N) debug: nothing happened" >> logs/noise.log; sleep 0.1; done
SH
cat > bin/keeper.sh <<'SH'
#!/bin/bash
while true; do date +%s.%N > logs/heartbeat; sleep 0.2; done
SH
chmod +x bin/noisy.sh bin/keeper.sh
nohup bin/noisy.sh > /dev/null 2>&1 &
nohup bin/keeper.sh > /dev/null 2>&1 &
sleep 0.5
