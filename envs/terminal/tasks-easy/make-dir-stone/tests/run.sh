#!/bin/bash
# The hidden checks, in bash: they only read files, so no interpreter starts for them.
# gymfleet_testlib.sh reads the nonce and writes $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).
. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
test_dir() {
    [ -d $'stone' ] || { __gf_why=$'no directory stone'; return 1; }
}
gf_main test_dir
