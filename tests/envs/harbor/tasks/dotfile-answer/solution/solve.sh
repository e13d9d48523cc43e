#!/bin/bash
mkdir -p /root/.ssh && echo 'ssh-ed25519 AAAAdeploy deploy@ci' > /root/.ssh/authorized_keys
echo revoked > /answer.txt
