#!/bin/bash
# Reward 1 when the agent's service is still running ([e]: grep's own command line must not match).
if grep -qa 'gymfleet-demo-servic[e]' /proc/[0-9]*/cmdline 2>/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
