#!/bin/bash
# Reward 1 when the image's service is up for the tests and the agent made /app/done.
if grep -qa 'gymfleet-entry-servic[e]' /proc/[0-9]*/cmdline 2>/dev/null && [ -f /app/done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
