#!/bin/bash
# The hidden checks, in bash: they only read files, so no interpreter starts for them.
# gymfleet_testlib.sh reads the nonce and writes $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).
. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
test_renamed() {
    gf_equal done.txt $'tiger notes\n' || return 1; [ ! -e $'tiger.txt' ] || { __gf_why=$'tiger.txt still exists'; return 1; }
}
gf_main test_renamed
