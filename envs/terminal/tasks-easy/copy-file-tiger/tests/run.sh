#!/bin/bash
# The hidden checks, in bash: they only read files, so no interpreter starts for them.
# gymfleet_testlib.sh reads the nonce and writes $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).
. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
test_copy() {
    gf_equal backup.txt $'tiger data\n' || return 1; gf_equal $'tiger.txt' $'tiger data\n'
}
gf_main test_copy
