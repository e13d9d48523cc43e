#!/bin/bash
# Runs the hidden checks; they write $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).
exec python3 -I "$GYMFLEET_TEST_DIR/checks.py"
