#!/bin/bash
# The hidden checks, in bash: they only read files, so no interpreter starts for them.
# gymfleet_testlib.sh reads the nonce and writes $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).
. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
test_answer() {
    gf_equal_stripped answer.txt $'velvet'
}
gf_main test_answer
