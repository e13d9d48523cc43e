#!/bin/bash
if [ "$(cat /root/.ssh/authorized_keys 2>/dev/null)" = "ssh-ed25519 AAAAdeploy deploy@ci" ] \
   && [ "$(cat /answer.txt 2>/dev/null)" = "revoked" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
