# The bash helper hidden tests may source inside the sandbox (copied there as gymfleet_testlib.sh).
#
# For checks that only look at files: no interpreter starts (a Python test costs ~40 ms of CPU
# for its start and unittest's import; these checks cost a few bash builtins). It keeps the
# grader's contract (envs/terminal/README.md): it reads and removes the nonce file when sourced,
# runs each named check, and writes the JSON result file echoing the nonce.
#
# Only for checks that never run a program of the agent's: bash cannot make itself
# non-dumpable as gymfleet_testlib.py does, so a program the tests start could read the nonce
# from its memory. Use the Python testlib for those.
#
# Usage in a task's tests/run.sh:
#   . "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
#   test_answer() { gf_equal answer.txt $'apple\n'; }
#   gf_main test_answer
# A check passes when its function returns 0; it runs in a subshell (its cd and variables stay
# there); the first failed gf_* helper names the file in the message.

IFS= read -r __gf_nonce < "$GYMFLEET_NONCE_FILE" 2>/dev/null
rm -f -- "$GYMFLEET_NONCE_FILE"
unset GYMFLEET_NONCE_FILE

# gf_read VAR FILE: the whole text of FILE (a regular file) into VAR, byte for byte.
gf_read() {
    [ -f "$2" ] && [ -r "$2" ] || return 1
    IFS= read -r -d '' "$1" < "$2"
    return 0  # read stops at the end of the file with status 1: the text is all there
}

# gf_equal FILE TEXT: FILE holds exactly TEXT.
gf_equal() {
    local got
    gf_read got "$1" && [ "$got" = "$2" ] && return 0
    __gf_why="$1 does not hold the expected text"
    return 1
}

# gf_equal_stripped FILE TEXT: FILE holds TEXT with whitespace around it (Python's str.strip()).
gf_equal_stripped() {
    local got
    gf_read got "$1" || { __gf_why="no regular file $1"; return 1; }
    got="${got#"${got%%[![:space:]]*}"}"
    got="${got%"${got##*[![:space:]]}"}"
    [ "$got" = "$2" ] && return 0
    __gf_why="$1 does not hold $2"
    return 1
}

__gf_json() {  # __gf_json VAR TEXT: VAR = TEXT as a JSON string (no subshell: no fork)
    local s=${2//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\n'/\\n}
    s=${s//$'\t'/\\t}
    s=${s//[$'\001'-$'\037']/?}
    printf -v "$1" '"%s"' "$s"
}

# gf_main CHECK...: runs each check function, writes $GYMFLEET_RESULT_FILE, exits 0 iff all passed.
gf_main() {
    local name msg status out="" sep="" failed=0 jname jmsg jnonce
    for name in "$@"; do
        if msg=$(__gf_why=""; "$name" && exit 0; echo "${__gf_why:-$name returned non-zero}"; exit 1); then
            status=passed msg=""
        else
            status=failed failed=1
        fi
        __gf_json jname "$name"
        __gf_json jmsg "$msg"
        out+="$sep{\"name\": $jname, \"status\": \"$status\", \"message\": $jmsg}"
        sep=", "
        echo "$name ... $status${msg:+: $msg}"
    done
    __gf_json jnonce "$__gf_nonce"
    printf '{"nonce": %s, "tests": [%s]}\n' "$jnonce" "$out" > "$GYMFLEET_RESULT_FILE"
    exit "$failed"
}
