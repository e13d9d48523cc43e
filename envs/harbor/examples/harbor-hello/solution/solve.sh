#!/bin/bash
set -e
jq -n --arg g "$(cat "$GREETING_FILE")" --argjson c "$(wc -l < /app/data/numbers.txt)" \
  '{greeting: $g, count: $c}' > /app/out.json
