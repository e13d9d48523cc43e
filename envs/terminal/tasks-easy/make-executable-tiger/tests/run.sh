#!/bin/bash
# The hidden checks, in bash: they only read files, so no interpreter starts for them.
# gymfleet_testlib.sh reads the nonce and writes $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).
. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
test_executable() {
    [ -x $'tiger.sh' ] || { __gf_why=$'tiger.sh is not executable'; return 1; }; gf_equal $'tiger.sh' $'echo tiger\n'
}
gf_main test_executable
