"""A task's Dockerfile made buildable offline: unpullable FROMs substituted by Debian stand-ins.

Nothing can be pulled from a registry here, so each ``FROM`` naming a public image is replaced by
one of the debootstrap-built Debian bases under ``images/`` (``base`` = bookworm,
``base-bullseye``, ``base-trixie``) plus a few ``RUN`` lines that give it what the original image
had (Python and pip for ``python:*``, tmux for the Terminal-Bench bases, compilers for
``buildpack-deps``). The release is the one nearest the original: by its Debian/Ubuntu lineage,
or for ``python:3.X`` the release whose ``python3`` is nearest 3.X (bullseye 3.9, bookworm 3.11,
trixie 3.13). Every substitution is recorded (:attr:`Translation.substitutions`).

An image's own ``ENTRYPOINT`` is reset (the sandbox's keep-alive must be PID 1) and started by
the env as Harbor starts it (:func:`entrypoint_command`). What the verifier fetches is staged by
:mod:`.staging`.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from gymfleet.envs.errors import ImageBuildError


class UnbuildableError(ImageBuildError):
    """The task's image cannot be built here; ``str()`` is one line, ``unbuildable: <reason>``.

    Attributes:
        reason: the reason alone.
    """

    def __init__(self, reason: str) -> None:
        self.reason = " ".join(reason.split())
        super().__init__(f"unbuildable: {self.reason}")


@dataclass(frozen=True)
class Base:
    """A substitute for a public image: a gymfleet base image and what to add to it."""

    image: str
    """Folder under ``images/`` (``base``, ``base-bullseye``, ``base-trixie``)."""
    packages: tuple[str, ...] = ()
    """Debian packages installed on top."""
    python: bool = False
    """Make ``python``/``pip`` the Debian ``python3``/``pip3`` (and let pip install system-wide)."""
    note: str = ""
    """How the stand-in differs from the original where it matters (another ``python3``)."""
    ubuntu: bool = False
    """It stands in for an Ubuntu image, whose apt sources hold every component (main, universe,
    restricted, multiverse): Debian's ``contrib`` and ``non-free`` are enabled to match."""


SUITES = {"bullseye": "base-bullseye", "bookworm": "base", "trixie": "base-trixie"}
"""Debian release -> the gymfleet base image debootstrapped from it."""
PYTHONS = {(3, 9): "bullseye", (3, 11): "bookworm", (3, 13): "trixie"}
"""The ``python3`` each release ships."""
UBUNTU = {"18.04": "bullseye", "20.04": "bullseye", "focal": "bullseye", "22.04": "bookworm",
          "jammy": "bookworm", "24.04": "trixie", "noble": "trixie", "latest": "trixie",
          "24-04": "trixie", "22-04": "bookworm", "20-04": "bullseye"}
"""Ubuntu release -> the Debian release nearest it (by glibc and Python)."""
DEBIAN = {"11": "bullseye", "12": "bookworm", "13": "trixie", "stable": "trixie", "latest": "trixie",
          "bullseye": "bullseye", "bookworm": "bookworm", "trixie": "trixie"}
UBUNTU_EXTRA = ("procps",)
"""What Ubuntu's images have and Debian's minimal ones lack, that tasks rely on (``ps``,
``pgrep``: a published task's tests ran ``pgrep`` and failed on the stand-in)."""
TBENCH = ("tmux",)
"""What the Terminal-Bench base images add (asciinema is left out: nothing records here)."""
BUILDPACK = ("curl", "wget", "git", "build-essential", "procps", "unzip", "xz-utils")


def nearest_python_suite(version: str) -> str:
    """The Debian release whose ``python3`` is nearest ``version`` (``3.12`` -> trixie; ties go
    to the newer release)."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if not match:
        return "bookworm"
    wanted = (int(match.group(1)), int(match.group(2)))
    return min(PYTHONS.items(), key=lambda kv: (abs(kv[0][1] - wanted[1]) + 100 * abs(kv[0][0] - wanted[0]), -kv[0][1]))[1]


OFFICIAL_MIRRORS = ("docker.io/library/", "index.docker.io/library/", "registry-1.docker.io/library/",
                    "public.ecr.aws/docker/library/", "mirror.gcr.io/library/", "mirror.gcr.io/")
"""Registries that serve Docker's official images under their own names (AWS's and Google's
mirrors, which task templates use to dodge Docker Hub's rate limits): ``<mirror><image>`` is
``<image>``."""


def official_name(ref: str) -> str:
    """``public.ecr.aws/docker/library/python:3.12`` -> ``python:3.12``: a reference to an
    official image through a mirror (:data:`OFFICIAL_MIRRORS`), as the image itself; any other
    reference unchanged."""
    for mirror in OFFICIAL_MIRRORS:
        if ref.startswith(mirror) and "/" not in ref[len(mirror):]:
            return ref[len(mirror):]
    return ref.removeprefix("library/")


def python_suite(tag: str) -> tuple[str, str]:
    """The release standing in for ``python:<tag>``, and a note when its ``python3`` is not the
    tag's. A release the tag names (``3.11-slim-bookworm``) is kept unless its ``python3`` is
    older than the tag's (``3.12-slim-bookworm``: bookworm has 3.11), since code written for 3.X
    runs on a newer Python far more often than on an older one; then the nearest release with a
    newer ``python3`` (trixie: 3.13) stands in, and the note says so."""
    named = next((s for s in SUITES if s in tag), None)
    match = re.match(r"(\d+)\.(\d+)", tag)
    if match is None:
        return named or "bookworm", ""
    wanted = (int(match.group(1)), int(match.group(2)))
    by_suite = {suite: version for version, suite in PYTHONS.items()}
    if named and by_suite[named] >= wanted:
        suite = named
    elif named:
        newer = [(v, s) for v, s in PYTHONS.items() if v >= wanted]
        suite = min(newer)[1] if newer else max(PYTHONS.items())[1]
    else:
        suite = nearest_python_suite(tag)
    have = by_suite[suite]
    notes = [f"python3 is {have[0]}.{have[1]}, not {wanted[0]}.{wanted[1]}"] if have != wanted else []
    if named and suite != named:
        notes.append(f"Debian {suite}, not {named}")
    return suite, "; ".join(notes)


def substitute(image: str) -> Base | None:
    """The base that stands in for the public ``image``, or None when there is none.

    A digest (``ubuntu:24.04@sha256:...``) is ignored: the substitute is the tag's stand-in
    either way, and the caller records the original reference, digest included."""
    ref = official_name(image.lower().partition("@")[0])
    repo, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
    name = repo.split("/")[-1]
    suite: str | None
    if repo.startswith("ghcr.io/laude-institute/t-bench/"):
        if name.startswith("python-"):
            suite = nearest_python_suite(name.removeprefix("python-").replace("-", "."))
            return Base(SUITES[suite], ("python3", "python3-pip", "python3-venv", *TBENCH), python=True)
        version = re.sub(r"^ubuntu-", "", name)
        suite = UBUNTU.get(version) or DEBIAN.get(re.sub(r"^debian-", "", name))
        return Base(SUITES[suite], TBENCH, ubuntu=version in UBUNTU) if suite else None
    if repo == "python":
        suite, note = python_suite(tag)
        extra = () if "slim" in tag else ("python3-dev", *BUILDPACK)
        return Base(SUITES[suite], ("python3", "python3-pip", "python3-venv", *extra), python=True, note=note)
    if repo == "ubuntu":
        suite = UBUNTU.get(tag) or UBUNTU.get(tag.split(".")[0] + ".04")
        return Base(SUITES[suite], ubuntu=True) if suite else None
    if repo == "debian":
        suite = next((s for key, s in DEBIAN.items() if tag.startswith(key)), None)
        return Base(SUITES[suite]) if suite else None
    if repo == "buildpack-deps":
        suite = UBUNTU.get(tag.split("-")[0]) or DEBIAN.get(tag.split("-")[0]) or "bookworm"
        return Base(SUITES[suite], BUILDPACK, ubuntu=tag.split("-")[0] in UBUNTU and tag.split("-")[0] not in DEBIAN)
    if repo == "node":
        suite = next((s for s in SUITES if s in tag), "bookworm")
        return Base(SUITES[suite], ("nodejs", "npm", *BUILDPACK))
    return None


@dataclass
class Translation:
    """The rewritten Dockerfile and what was done to it.

    Attributes:
        dockerfile: the text to build.
        bases: gymfleet base images it builds FROM (to ensure first).
        substitutions: ``"<original> -> <gymfleet base> (+packages)"`` per substituted FROM.
        final_user: the last ``USER`` of the final stage, or None.
        entrypoint: the final stage's ``ENTRYPOINT`` as an argv (shell form: ``/bin/sh -c``), or
            None; see :func:`entrypoint_lines`.
    """

    dockerfile: str
    bases: list[str] = field(default_factory=list)
    substitutions: list[str] = field(default_factory=list)
    final_user: str | None = None
    entrypoint: list[str] | None = None


def logical_lines(text: str) -> list[str]:
    """Dockerfile instructions, one string each: comments dropped, ``\\`` continuations joined.
    (Heredoc bodies and a non-default ``# escape=`` directive are not understood.)"""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):  # docker drops the backslash and the newline, nothing else
            current += raw.rstrip()[:-1]
            continue
        lines.append((current + raw).strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def translate(text: str, base_tags: dict[str, str], host_ca: bool = True) -> Translation:
    """Rewrites the FROM lines of ``text`` to gymfleet bases (see :func:`substitute`).

    Args:
        text: the task's Dockerfile.
        base_tags: gymfleet base image name -> the exact tag to build FROM; a name missing here is
            written as ``gymfleet/<name>:latest``.
        host_ca: install the host's CA bundle (``gymfleet-host-ca.crt`` in the context) into
            substituted bases, for pip and curl behind a TLS-inspecting proxy.

    Raises:
        UnbuildableError: a FROM has no substitute, or the Dockerfile has no FROM.
    """
    out: list[str] = []
    result = Translation("")
    stages: set[str] = set()
    args: dict[str, str] = {}
    seen_from = False
    alias: str | None = None
    stage_entrypoints: dict[str | None, list[str] | None] = {}
    for line in logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not seen_from:
            name, _, default = rest.strip().partition("=")
            args[name.strip()] = default.strip().strip('"')
        if keyword != "FROM":
            if keyword == "USER":
                result.final_user = rest.strip()
            if keyword == "ENTRYPOINT":
                result.entrypoint = exec_form(rest) or None
            out.append(line)
            continue
        seen_from = True
        result.final_user = None
        words = [w for w in rest.split() if not w.startswith("--")]
        stage_entrypoints[alias] = result.entrypoint
        alias = words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else None
        result.entrypoint = stage_entrypoints.get(words[0].lower()) if words else None  # FROM an earlier stage inherits it
        out += _from_lines(rest, args, stages, base_tags, host_ca, result)
    if not seen_from:
        raise UnbuildableError("the Dockerfile has no FROM")
    result.dockerfile = "\n".join(out) + "\n"
    return result


def _from_lines(rest: str, args: dict[str, str], stages: set[str], base_tags: dict[str, str],
                host_ca: bool, result: Translation) -> list[str]:
    words = [w for w in rest.split() if not w.startswith("--platform")]
    image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), words[0]) if words else ""
    alias = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
    suffix = f" AS {alias}" if alias else ""
    if alias:
        stages.add(alias.lower())
    if image.lower() in stages or image == "scratch":
        return [f"FROM {image}{suffix}"]
    if image.startswith("gymfleet/"):
        return [f"FROM {image}{suffix}"]
    base = substitute(image)
    if base is None:
        raise UnbuildableError(f"FROM {image} cannot be pulled here and has no Debian substitute")
    tag = base_tags.get(base.image, f"gymfleet/{base.image}:latest")
    result.bases.append(base.image)
    result.substitutions.append(f"{image} -> gymfleet/{base.image}" + (f" (+{' '.join(base.packages)})" if base.packages else "")
                                + (f" [{base.note}]" if base.note else ""))
    return [f"FROM {tag}{suffix}", *prelude(base, host_ca)]


def exec_form(rest: str) -> list[str]:
    """An ``ENTRYPOINT``/``CMD`` argument as an argv: the JSON form as given, the shell form
    under ``/bin/sh -c`` (as Docker runs it); empty for ``[]``."""
    text = rest.strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return ["/bin/sh", "-c", text] if text else []


ENTRYPOINT_ARGS = ["sh", "-c", "sleep infinity"]
"""What Harbor's compose file starts a task's container with (``command``), after the image's
entrypoint: an entrypoint that ends in ``exec "$@"`` becomes a harmless sleep."""


def entrypoint_lines(translation: Translation) -> list[str]:
    """``ENTRYPOINT []`` when the image has one: the sandbox's keep-alive must be PID 1 (an
    entrypoint that does not ``exec "$@"`` stayed PID 1 beside it, and stopping the agent's
    processes failed). The entrypoint is started as Harbor starts it by the env instead
    (:data:`ENTRYPOINT_ARGS`; ``HarborEnv.prepare`` and the grader)."""
    return ["ENTRYPOINT []"] if translation.entrypoint else []


def entrypoint_command(argv: list[str]) -> str:
    """A shell command that starts ``argv`` (an image's entrypoint) with :data:`ENTRYPOINT_ARGS`
    in a session of its own, its output to ``/tmp/.gymfleet-entrypoint.log``, and gives it two
    seconds to bring its services up."""
    started = shlex.join([*argv, *ENTRYPOINT_ARGS])
    return f"setsid nohup {started} >/tmp/.gymfleet-entrypoint.log 2>&1 </dev/null & sleep 2"


RECOMMENDS_LINE = ("RUN printf 'APT::Install-Recommends \"true\";\\n' "
                   "> /etc/apt/apt.conf.d/81gymfleet-harbor-recommends")
"""The task's own ``apt-get install`` lines get Recommends, as in Docker's official images (the
debootstrap bases turn them off: ``80gymfleet``). Without them ``apt-get install gcc`` on an
Ubuntu stand-in brought no ``libc6-dev``, and a task compiling C found no ``stdio.h``."""


def prelude(base: Base, host_ca: bool) -> list[str]:
    """The instructions that make a gymfleet base look like the image it stands in for."""
    lines = ["ENV DEBIAN_FRONTEND=noninteractive"]
    if host_ca:
        lines.append("COPY gymfleet-host-ca.crt /usr/local/share/ca-certificates/gymfleet-host-ca.crt")
    packages = " ".join(("ca-certificates", *(UBUNTU_EXTRA if base.ubuntu else ()), *base.packages))
    components = "sed -i 's/ main$/ main contrib non-free/' /etc/apt/sources.list && " if base.ubuntu else ""
    lines.append(f"RUN {components}apt-get update && apt-get install -y --no-install-recommends {packages} "
                 "&& update-ca-certificates && rm -rf /var/lib/apt/lists/*")
    lines.append(RECOMMENDS_LINE)  # after the stand-in's own packages, whose layer tasks share
    if base.python:
        lines.append("RUN ln -sf /usr/bin/python3 /usr/local/bin/python && ln -sf /usr/bin/pip3 /usr/local/bin/pip")
        lines.append("ENV PIP_BREAK_SYSTEM_PACKAGES=1")
    lines.append("ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
    return lines


def is_root(user: str | None) -> bool:
    """True when a Dockerfile's ``USER`` value (``name[:group]`` or ``uid[:gid]``) is root."""
    return user is None or user.split(":")[0].strip() in ("", "root", "0")


def user_folder_lines(final_user: str | None) -> list[str]:
    """For an image whose final ``USER`` is not root: ``/logs/verifier`` and ``/solution`` made
    at build time, empty, mode 1777, since the verifier and the oracle's commands run as that
    user and can neither make root's folders nor write root-owned ones. (An agent's files left in
    ``/logs/verifier`` are its own, so the grader's ``rm -rf`` still removes them; ``/tests``
    stays root's: the tests are copied in by archive.)"""
    if is_root(final_user):
        return []
    return ["USER root", "RUN mkdir -p /logs/verifier /solution && chmod 1777 /logs/verifier /solution",
            f"USER {final_user}"]
