"""What a verifier's script fetches, staged at build time; the script as it runs offline.

The verifier runs without network, so what its script would fetch (:class:`VerifierStaging`)
is fetched at build time, when ``RUN`` reaches Debian and PyPI: its ``apt-get install``
packages are installed, uv's install script is replaced by uv's own wheel from PyPI, and its
``pip install`` / ``uv add`` / ``uvx -w`` / ``uv run --with`` lines are replayed in a scratch
folder so that the packages are installed or in uv's cache (``UV_OFFLINE=1`` at grading reads
them from there). A replayed step that fails fails the build, saying which. uv's throw-away cache
flags (``--no-cache``, ``--no-cache-dir``) are dropped from the replay and from the script the
verifier runs (:func:`offline_script`), else both would miss the staged cache.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field


_UV_SCRIPT = re.compile(r"astral\.sh/uv/(?:(\d+\.\d+\.\d+)/)?install\.sh")
_APT = re.compile(r"\bapt(?:-get)?\s+install\s+([^;&|]+)")
_NO_CACHE_FLAGS = ("--no-cache", "--no-cache-dir", "-n")
"""uv's flags for a throw-away cache (``--no-cache-dir`` is its pip-compatible alias; ``-n`` its
short form, read only among uv's own options): replayed as given, staging filled nothing."""
_NO_CACHE = re.compile(r"[ \t]+--no-cache(?:-dir)?(?=\s|$)")
_UV_LINE = re.compile(r"^\s*(?:\w+=\S*\s+)*(?:uvx|uv)\s")
_REPLAY = re.compile(r"^\s*(?:pip3?|python3?\s+-m\s+pip|uv\s+pip|uv)\s+(?:install|add|init|venv|sync)\b")


@dataclass
class VerifierStaging:
    """What a verifier script fetches, to be fetched at build time.

    Attributes:
        apt_packages: packages its ``apt-get install`` lines name.
        uv_version: the uv its install script would fetch (``latest`` when unpinned), or None.
        replay: its ``pip``/``uv``/``uvx`` lines, rewritten to run at build time.
    """

    apt_packages: list[str] = field(default_factory=list)
    uv_version: str | None = None
    replay: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when the verifier fetches nothing this module knows of."""
        return not (self.apt_packages or self.uv_version or self.replay)


def shell_lines(script: str) -> list[str]:
    """The lines of a shell script with ``\\`` continuations joined (the backslash, the newline
    and the indentation around them become one space; a comment line never continues).
    Heredocs and quoted newlines are not understood."""
    lines: list[str] = []
    current: str | None = None
    for raw in script.splitlines():
        if current is None and raw.lstrip().startswith("#"):
            lines.append(raw)
            continue
        piece = raw if current is None else _join(current, raw)
        if piece.endswith("\\") and not piece.endswith("\\\\"):
            current = piece[:-1]
            continue
        lines.append(piece)
        current = None
    if current is not None:
        lines.append(current)
    return lines


def _join(head: str, tail: str) -> str:
    if head[-1:].isspace() or tail[:1].isspace():
        return head.rstrip() + " " + tail.lstrip()
    return head + tail  # `a\<newline>b` is the word `ab` to the shell


def verifier_staging(script: str) -> VerifierStaging:
    """Finds what ``script`` (``tests/test.sh`` or ``run-tests.sh``) fetches at grading time
    (continuation lines joined: TB2's scripts split their ``uvx`` line over several)."""
    staging = VerifierStaging()
    for line in shell_lines(script):
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if (match := _UV_SCRIPT.search(line)) is not None:
            staging.uv_version = match.group(1) or "latest"
        for apt in _APT.finditer(line):
            staging.apt_packages += [w for w in apt.group(1).split() if not w.startswith("-")]
        if (uvx := _uvx_warmup(line)) is not None:
            staging.replay.append(uvx)
            if re.search(r"(?:-p|--python)[ =]3\.\d+", line):  # uv finds the release's python3; none is downloaded
                staging.apt_packages.append("python3")
        elif _REPLAY.match(line) and "-r " not in line and "/tests" not in line and "$" not in line:
            staging.replay.append(_NO_CACHE.sub("", line).strip())
    staging.apt_packages = list(dict.fromkeys(staging.apt_packages))
    return staging


def _uvx_warmup(line: str) -> str | None:
    """``uvx [opts] tool args`` -> ``uvx [opts] tool --version`` (fills uv's cache, runs nothing)."""
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    if not words or words[0] not in ("uvx", "uv"):
        return None
    start = {"uvx": 1}.get(words[0]) or (3 if words[1:3] == ["tool", "run"] else 2 if words[1:2] == ["run"] else None)
    if start is None:
        return None
    words = [w for w in words if w not in _NO_CACHE_FLAGS]  # the warm-up must fill the cache
    with_value = {"-p", "--python", "-w", "--with", "--from", "--with-requirements", "--index-url",
                  "--cache-dir", "--directory", "--project"}
    i = start
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in with_value else 1
    if i >= len(words) or any("$" in w or w.startswith("/tests") for w in words[start:i + 1]):
        return None
    if words[1:2] == ["run"] and not {"-w", "--with"} & set(words[start:i]) and not any(w.startswith("--with=") for w in words[start:i]):
        return None  # `uv run` of the project: its `uv add` lines are what stages it
    return shlex.join([*words[:i + 1], "--version"])


def offline_script(script: str) -> str:
    """``script`` (a verifier's ``test.sh``) as it runs offline here: ``--no-cache`` and
    ``--no-cache-dir`` dropped from its ``uv``/``uvx`` commands (continuation lines included),
    since a throw-away cache holds none of what staging put in uv's cache and ``UV_OFFLINE``
    then finds nothing. Nothing else changes; a script without them is returned as is."""
    out: list[str] = []
    uv = continued = False
    for raw in script.splitlines(keepends=True):
        body = raw.rstrip("\r\n")
        uv = uv if continued else bool(_UV_LINE.match(body))
        if uv and _NO_CACHE.search(body):
            raw = _NO_CACHE.sub("", body) + raw[len(body):]
        continued = body.rstrip().endswith("\\")
        out.append(raw)
    return "".join(out)


STAGING_FAILED = "gymfleet: the verifier's fetch could not be staged at build time: "
"""How a failed staging step starts its error line (the build fails on it)."""


def staging_lines(staging: VerifierStaging, final_user: str | None) -> list[str]:
    """Dockerfile instructions appended to the final stage to stage ``staging``."""
    if staging.empty:
        return []
    lines = ["USER root"] if final_user else []
    if staging.apt_packages:
        lines.append("RUN apt-get update && apt-get install -y "
                     f"{' '.join(shlex.quote(p) for p in staging.apt_packages)} && rm -rf /var/lib/apt/lists/* || true")
    if staging.uv_version:
        lines.append("COPY gymfleet-stage/uv gymfleet-stage/uvx gymfleet-stage/env /root/.local/bin/")
    if staging.replay:
        # each step must work: a failed one left the verifier to fail offline, silently (it was `|| true`)
        body = " ".join(f"{cmd} || {{ echo {shlex.quote(STAGING_FAILED + cmd)} >&2; exit 1; }};" for cmd in staging.replay)
        lines.append(f'RUN export PATH="/root/.local/bin:$PATH" UV_PYTHON_DOWNLOADS=never; d=$(mktemp -d); cd "$d"; {body} cd /; rm -rf "$d"')
    if final_user:
        lines.append(f"USER {final_user}")
    return lines


VERIFIER_APT_DIR = "/logs/gymfleet-apt"
VERIFIER_APT_FILES = {
    f"{VERIFIER_APT_DIR}/apt.conf": f'Dir::Etc::main "{VERIFIER_APT_DIR}/last.conf";\n'.encode(),
    f"{VERIFIER_APT_DIR}/last.conf": b'Acquire::Retries "0";\n',
}
"""Put beside the tests at grading: apt reads ``$APT_CONFIG`` first, ``apt.conf.d`` next and
``Dir::Etc::main`` last, so pointing main at ``last.conf`` turns off the base images' retries
(``Acquire::Retries 5``, with back-off): an offline ``apt-get update`` in a verifier took 32 s,
now about 1 s."""
VERIFIER_OFFLINE_ENV = {"UV_OFFLINE": "1", "UV_PYTHON_DOWNLOADS": "never", "PIP_RETRIES": "0",
                        "PIP_DEFAULT_TIMEOUT": "5", "APT_CONFIG": f"{VERIFIER_APT_DIR}/apt.conf"}
"""Environment of every verifier: uv reads its cache only, pip and apt give up fast."""
