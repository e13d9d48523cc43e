#!/bin/bash
# Starts the task's "service", then waits on it: the container's command is never run.
bash -c 'exec -a gymfleet-entry-service sleep 100000' &
wait
