#!/bin/bash
# Runs past [verifier] timeout_sec.
sleep 120
echo 1 > /logs/verifier/reward.txt
