#!/bin/bash
# As Terminal-Bench 2 verifiers do: fetch curl and uv, run pytest through uvx (the template's
# flags: a throw-away cache, -w and --with, continuation lines), reward from its exit.
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx --no-cache-dir \
  -p 3.13 \
  -w pytest==8.4.1 --with iniconfig==2.1.0 \
  pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
