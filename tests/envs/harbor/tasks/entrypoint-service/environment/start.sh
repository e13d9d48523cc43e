#!/bin/bash
# Starts the task's "service", then waits for ever: the container's command is never run.
bash -c 'exec -a gymfleet-entry-service sleep 100000' &
while true; do sleep 1; done
