#!/bin/bash
# Runs as the image's user: it must be able to write the reward.
if grep -qx hi /app/out.txt 2>/dev/null; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
