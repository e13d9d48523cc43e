"""The shell side of a Docker exec: the wrapper script that runs one command inside a container,
and the parsing of the frame it prints back.

Why a wrapper: ``docker exec`` streams until every holder of the exec's stdout has closed it, so a
command that leaves a daemon running (``python -m http.server &``) would hang a plain exec. The
wrapper sends the command's output to files inside the container, starts it in its own session
(``setsid``: process group id = its pid, written to a file so that the host can kill the whole
group on timeout), waits only for the command itself, then prints a frame: a header with the exit
code and the full sizes, followed by the head and tail of each stream. Only the head and tail
cross the socket, so a command printing gigabytes costs the host ``max_output_bytes``.

Frame (all on the wrapper's stdout)::

    GYMFLEET-EXEC <exit code>\\n
    <stdout size> <stderr size>\\n
    <stdout head><stdout tail><stderr head><stderr tail>

The head and tail lengths follow from the sizes and the limits, so no escaping is needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gymfleet.envs.sandbox.output import MARKER, capture

EXEC_ROOT = "/run/gymfleet-exec"
"""Folder inside the container holding one sub-folder per running command (its own bounded
space, apart from /tmp: an agent that fills /tmp still sees its commands' output)."""

# PID 1 of every sandbox container: a bash that ignores every signal it can be sent and blocks,
# forking nothing, on a pipe only it holds, reaping the orphans re-parented to it meanwhile. The
# kernel delivers no signal to a namespace's init from inside unless init handles it, and it
# handles only USR2, by killing every other process (the builtin ``kill -9 -1``: what the host
# sends before a verifier runs, docker_seal.py; sent from inside it is just ``kill -9 -1``), so
# nothing an agent does as root inside (``kill -9 -1``, ``kill -9 1``, ``pkill sleep``,
# ``rm -rf /``) stops the container: only the host can.
KEEPALIVE = r"""
trap '' HUP INT QUIT TERM USR1 PIPE ALRM TSTP TTIN TTOU
trap 'kill -9 -1' USR2
exec 3<> <(:)
while :; do read -r -u 3 _ || exec 3<> <(:); done
"""
KEEPALIVE_ARGV = ["bash", "-c", KEEPALIVE, "gymfleet-keepalive"]
"""The container's command (no Docker init: this is PID 1)."""

# Positional arguments: $1 exec dir, $2 workdir, $3 head bytes, $4 tail bytes, $5 the command.
# `relieve` uses only builtins (no fork), so it works when the sandbox is out of processes. When
# the cgroup's pids.events shows that a fork failed at the pids limit since it last looked (a fork
# bomb, perhaps left running in the background), it kills every process but PID 1 and this
# wrapper: at the limit the episode may keep nothing (daemons included), as the local backend
# does. It runs before and after each command.
WRAPPER = r"""
d=$1 head=$3 tail=$4 root=${1%/*} note=
read -r -a init </proc/1/stat && printf 'GYMFLEET-INIT %s\n' "${init[21]}"
relieve() {
  local f kind hits seen=0 p
  for f in /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events; do
    { read -r kind hits <"$f"; } 2>/dev/null || continue
    { read -r seen <"$root/pids-hits"; } 2>/dev/null
    [ "$kind" = max ] && [ "${hits:-0}" -gt "${seen:-0}" ] || return 0
    echo "$hits" 2>/dev/null >"$root/pids-hits"
    for p in /proc/[0-9]*; do
      p=${p#/proc/}
      [ "$p" = 1 ] || [ "$p" = "$$" ] || kill -9 "$p" 2>/dev/null
    done
    note="[gymfleet: a fork failed at the sandbox's process limit: killed every process earlier commands left running]"
    return 0
  done
}
relieve
if ! why=$(mkdir -p -- "$d" 2>&1); then
  printf 'GYMFLEET-EXEC-FAILED %s\n' "$why"
  exit 121
fi
if cd -- "$2" 2>"$d/err"; then
  setsid bash -c "$5" </dev/null >"$d/out" 2>>"$d/err" &
  pgid=$!
  echo "$pgid" >"$d/pid"
  # A cancel that came before the pid file existed left this marker: honour it (no race, as
  # the killer checks the pid file after writing the marker).
  [ -e "$d/cancel" ] && kill -9 -- "-$pgid" 2>/dev/null
  wait "$pgid"
  rc=$?
  relieve
else
  rc=1
  : >"$d/out"
fi
[ -n "$note" ] && echo "$note" >>"$d/err"
printf 'GYMFLEET-EXEC %s\n' "$rc"
so=$(stat -c %s -- "$d/out") && se=$(stat -c %s -- "$d/err") || exit 122
printf '%s %s\n' "$so" "$se"
emit() {
  head -c "$(( $2 < head ? $2 : head ))" -- "$1"
  if [ "$2" -gt "$head" ]; then
    t=$(( $2 - head )); [ "$t" -gt "$tail" ] && t=$tail
    tail -c "$t" -- "$1"
  fi
}
emit "$d/out" "$so"
emit "$d/err" "$se"
rm -rf -- "$d"
"""

# $1 exec dir. Prints the start time of PID 1 (as the wrapper does first: a different one means
# the container was restarted meanwhile). Waits briefly for the pid file (the command may have just started), then kills
# the command's process group; `kill` and `read` are bash builtins, so nothing else is forked.
KILL_SCRIPT = r"""
read -r -a init </proc/1/stat && printf 'GYMFLEET-INIT %s\n' "${init[21]}"
mkdir -p -- "$1" && : >"$1/cancel"
for _ in {1..50}; do [ -s "$1/pid" ] && break; sleep 0.1; done
read -r pgid <"$1/pid" || exit 3
kill -9 -- "-$pgid" 2>/dev/null
exit 0
"""

# $1 workdir, $2 the exec root. Empties the workdir, /tmp and old command folders and kills every process but PID 1 (the keep-alive)
# and this shell: what a pool does between two users of one container.
RESET_SCRIPT = r"""
cd / || exit 1
rm -rf -- "$1"/* "$1"/.[!.]* "$1"/..?* /tmp/* /tmp/.[!.]* /tmp/..?* "$2"/* 2>/dev/null
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  case "$pid" in 1|"$$") continue;; esac
  kill -9 "$pid" 2>/dev/null
done
true
"""

_HEADER = re.compile(rb"GYMFLEET-EXEC (-?\d+)\n(?:(\d+) (\d+)\n)?")
_INIT = re.compile(rb"GYMFLEET-INIT (\d+)\n")
SETUP_FAILED = b"GYMFLEET-EXEC-FAILED "
"""What the wrapper prints, with the reason, when it cannot even make its folder in /tmp."""


def wrapper_argv(exec_dir: str, workdir: str, head_bytes: int, tail_bytes: int, cmd: str) -> list[str]:
    """The argv of ``docker exec`` that runs ``cmd`` under the wrapper."""
    return ["bash", "-c", WRAPPER, "gymfleet-exec", exec_dir, workdir, str(head_bytes), str(tail_bytes), cmd]


def split_limit(max_output_bytes: int) -> tuple[int, int]:
    """(head, tail) byte budgets for one stream: half each, the tail taking the odd byte (as
    :func:`gymfleet.envs.sandbox.output.capture` does)."""
    head = max(max_output_bytes, 0) // 2
    return head, max(max_output_bytes, 0) - head


@dataclass(frozen=True)
class Frame:
    """What the wrapper printed. ``sizes_known`` is False when it died after the exit code
    (its own tools were removed, e.g. by ``rm -rf /``), in which case the output is lost."""

    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    sizes_known: bool = True


def init_ticks(raw: bytes) -> int | None:
    """The start time of the container's PID 1 (clock ticks) that the wrapper or the kill script
    printed first; None when it printed none (it never started)."""
    match = _INIT.match(raw)
    return int(match.group(1)) if match else None


def parse_frame(raw: bytes, head_bytes: int, tail_bytes: int) -> Frame | None:
    """Parses the wrapper's stdout; None when it did not even print the header.

    Args:
        raw: everything the wrapper wrote to its stdout.
        head_bytes: the head budget it was given.
        tail_bytes: the tail budget it was given.
    """
    init = _INIT.match(raw)
    match = _HEADER.match(raw, init.end() if init else 0)
    if match is None:
        return None
    exit_code = int(match.group(1))
    if match.group(2) is None:
        return Frame(exit_code, "", "", 0, 0, sizes_known=False)
    sizes = int(match.group(2)), int(match.group(3))
    body = memoryview(raw)[match.end() :]
    texts = []
    for size in sizes:
        head_n = min(size, head_bytes)
        tail_n = min(max(size - head_bytes, 0), tail_bytes)
        head, tail = bytes(body[:head_n]), bytes(body[head_n : head_n + tail_n])
        body = body[head_n + tail_n :]
        texts.append(join_head_tail(head, tail, size))
    return Frame(exit_code, texts[0], texts[1], sizes[0], sizes[1])


def join_head_tail(head: bytes, tail: bytes, total_bytes: int) -> str:
    """Decodes a stream kept as head and tail (UTF-8, invalid bytes replaced), joined by
    :data:`~gymfleet.envs.sandbox.output.MARKER` when bytes were left out."""
    omitted = total_bytes - len(head) - len(tail)
    if omitted <= 0:
        return (head + tail).decode("utf-8", errors="replace")
    marker = MARKER.format(total=total_bytes, omitted=omitted)
    return head.decode("utf-8", errors="replace") + marker + tail.decode("utf-8", errors="replace")


def head_tail_of(data: bytes, max_output_bytes: int) -> str:
    """The same text for bytes held on the host (output read back by file copy)."""
    return capture(data, max_output_bytes)[0]
