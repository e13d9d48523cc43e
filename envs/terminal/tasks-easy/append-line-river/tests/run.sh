#!/bin/bash
# The hidden checks, in bash: they only read files, so no interpreter starts for them.
# gymfleet_testlib.sh reads the nonce and writes $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).
. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
test_appended() {
    gf_equal notes.txt $'first\nsecond\nriver\n' 2>/dev/null || gf_equal notes.txt $'first\nsecond\nriver'
}
gf_main test_appended
