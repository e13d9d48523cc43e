"""A task image with a command-line agent installed: the agent's npm package fetched on the host
(``npm pack``, cached by name and version; npm checks the registry's integrity hash), its native
binary checked (present, an ELF for the Docker host's architecture) and copied in as one layer.

The image is tagged ``gymfleet-agent/<agent>:<hash>``, the hash covering the task image's id, the
package tarball's SHA-256 and this layer's Dockerfile, so a second rollout of the same task costs one
API call, and any change rebuilds. The sandbox never reaches a registry.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

import docker
import docker.errors
from filelock import FileLock

from gymfleet.envs.errors import AgentInstallError
from gymfleet.envs.harness.cli_agents import AGENT_ROOT, CliAgent

ELF_MACHINES = {"x86_64": 62, "aarch64": 183}
"""Docker's architecture name to the ELF header's ``e_machine`` (System V ABI, "Machine")."""
NPM_TIMEOUT_S = 600.0
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gymfleet" / "npm"


def cache_dir() -> Path:
    """Where packed npm tarballs are kept (``GYMFLEET_NPM_CACHE``, else ``~/.cache/gymfleet/npm``)."""
    return Path(os.environ.get("GYMFLEET_NPM_CACHE") or DEFAULT_CACHE)


def fetch_package(spec: str, folder: Path | None = None) -> Path:
    """The tarball of npm package ``spec`` (``name@version``), packed once into ``folder``.

    Raises:
        AgentInstallError: npm is missing or could not fetch it (one line naming the fix).
    """
    folder = folder or cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / (re.sub(r"[^\w.-]+", "_", spec) + ".tgz")
    with FileLock(str(target) + ".lock"):
        if target.exists():
            return target
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            try:
                done = subprocess.run(["npm", "pack", spec, "--json", "--pack-destination", tmp],
                                      capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False)
            except FileNotFoundError as exc:
                raise AgentInstallError(f"npm is not installed: install Node.js to fetch {spec}") from exc
            except subprocess.TimeoutExpired as exc:
                raise AgentInstallError(f"npm pack {spec} ran past {NPM_TIMEOUT_S:g} s: check the registry") from exc
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise AgentInstallError(f"npm pack {spec} failed: {last}")
            packed = json.loads(done.stdout)[0]["filename"]
            os.replace(Path(tmp) / packed, target)
    return target


def check_binary(head: bytes, arch: str, what: str) -> None:
    """Checks that ``head`` (a binary's first bytes) is an ELF executable for ``arch``.

    Raises:
        AgentInstallError: not an ELF file, or built for another machine.
    """
    if head[:4] != b"\x7fELF" or len(head) < 20:
        raise AgentInstallError(f"{what} is not a Linux executable (no ELF header)")
    machine = int.from_bytes(head[18:20], "little")
    if machine != ELF_MACHINES.get(arch):
        names = {v: k for k, v in ELF_MACHINES.items()}
        raise AgentInstallError(f"{what} is built for {names.get(machine, f'ELF machine {machine}')}, "
                                f"but the Docker host runs {arch}")


def build_context(agent: CliAgent, tarball: Path, arch: str, parent: str, out: io.BufferedIOBase) -> str:
    """Writes the build context (Dockerfile and binary) of ``agent`` on ``parent`` to ``out``.

    Returns:
        The Dockerfile.

    Raises:
        AgentInstallError: the binary is missing from the package or is for another architecture.
    """
    member_name = agent.binary_member(arch)
    what = f"{member_name} of {tarball.name}"
    dockerfile = (f"FROM {parent}\nCOPY {agent.name} {AGENT_ROOT}/bin/{agent.name}\n"
                  f"LABEL gymfleet.agent={agent.name}\n")
    with tarfile.open(tarball, "r:gz") as package, tarfile.open(fileobj=out, mode="w") as context:
        try:
            member = package.getmember(member_name)
        except KeyError:
            raise AgentInstallError(f"{tarball.name} has no {member_name}: not {agent.name}'s {arch} "
                                    "package, or its layout changed (pin a validated version)") from None
        source = package.extractfile(member)
        if source is None or not member.isfile():
            raise AgentInstallError(f"{what} is not a regular file")
        check_binary(source.read(64), arch, what)
        source.seek(0)
        info = tarfile.TarInfo(agent.name)
        info.size, info.mode = member.size, 0o755
        context.addfile(info, source)
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        context.addfile(info, io.BytesIO(data))
    return dockerfile


def ensure_agent_image(agent: CliAgent, parent: str, version: str | None = None,
                       client: docker.DockerClient | None = None) -> str:
    """The tag of ``parent`` with ``agent`` installed, built when missing (blocking).

    Raises:
        AgentInstallError: the package could not be fetched, has no binary for the Docker host's
            architecture, or the build failed (one line each).
    """
    client = client or docker.from_env()
    arch = str(client.info().get("Architecture", "x86_64"))
    try:
        spec = agent.npm_spec(arch, version)
        parent_id = client.images.get(parent).id
    except KeyError as exc:
        raise AgentInstallError(str(exc.args[0])) from None
    except docker.errors.ImageNotFound:
        raise AgentInstallError(f"the task image {parent} is missing: build the task first") from None
    tarball = fetch_package(spec)
    digest = hashlib.sha256()
    digest.update(f"{parent_id}\n{agent.name}\n{agent.binary_member(arch)}\n".encode())
    with tarball.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    tag = f"gymfleet-agent/{agent.name}:{digest.hexdigest()[:12]}"
    with FileLock(str(cache_dir() / f"build-{agent.name}-{digest.hexdigest()[:12]}.lock")):
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        with tempfile.TemporaryFile() as context:
            build_context(agent, tarball, arch, parent, context)  # type: ignore[arg-type]
            context.seek(0)
            _build(client, context, tag, spec)
    return tag


def _build(client: docker.DockerClient, context: io.BufferedIOBase, tag: str, spec: str) -> None:
    last = ""
    try:
        for chunk in client.api.build(fileobj=context, custom_context=True, tag=tag, rm=True, decode=True):
            if "error" in chunk:
                raise AgentInstallError(f"installing {spec} failed: {str(chunk['error']).strip()[:300]}")
            last = str(chunk.get("stream", last)).strip() or last
    except docker.errors.APIError as exc:
        raise AgentInstallError(f"installing {spec} failed: {exc.explanation or exc}") from None
