#!/bin/bash
nohup setsid bash -c 'exec -a gymfleet-demo-service sleep 600' >/dev/null 2>&1 &
