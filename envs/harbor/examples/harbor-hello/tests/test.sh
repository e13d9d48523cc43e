#!/bin/bash
# Writes reward.json: the reward and one key per check (they reach info).
# -I: it runs in the agent's workdir, whose modules (a json.py) must not shadow what it imports.
python3 -I - <<'PY'
import json, os
try:
    out = json.load(open("/app/out.json"))
except Exception:
    out = {}
greeting = float(out.get("greeting") == "hello harbor")
count = float(out.get("count") == int(os.environ["EXPECTED_COUNT"]))
import six  # installed by the Dockerfile's pip line
json.dump({"reward": greeting * count, "greeting_ok": greeting, "count_ok": count},
          open("/logs/verifier/reward.json", "w"))
PY
