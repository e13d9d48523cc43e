#!/bin/bash
# The hidden checks, in bash: they only read files, so no interpreter starts for them.
# gymfleet_testlib.sh reads the nonce and writes $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).
. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
test_count() {
    local text first rest; gf_read text count.txt || { __gf_why=$'no regular file count.txt'; return 1; }; read -r first rest <<< "$text"; [[ $first =~ ^[0-9]+$ ]] && (( 10#$first == 3 )) || { __gf_why=$'count.txt does not start with the count'; return 1; }
}
gf_main test_count
