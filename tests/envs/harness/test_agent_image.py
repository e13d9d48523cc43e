"""Installing a CLI agent's binary into a task image: a package without the binary, or with one
built for another machine, is one line at build time (no Docker needed to tell)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from gymfleet.envs.errors import AgentInstallError
from gymfleet.envs.harness.agent_image import build_context, check_binary
from gymfleet.envs.harness.cli_agents import CODEX


def elf(machine: int) -> bytes:
    """The first bytes of a 64-bit little-endian ELF executable for ``machine``."""
    return b"\x7fELF\x02\x01\x01" + bytes(11) + machine.to_bytes(2, "little") + bytes(44)


def package(tmp_path: Path, files: dict[str, bytes]) -> Path:
    path = tmp_path / "openai-codex-0.171.0-linux-x64.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_binary_for_the_host_goes_into_the_context(tmp_path: Path) -> None:
    binary = elf(62) + b"rest of codex"
    out = io.BytesIO()
    dockerfile = build_context(CODEX, package(tmp_path, {CODEX.binary_member("x86_64"): binary}), "x86_64",
                               "gymfleet/terminal:abc", out)
    assert dockerfile.startswith("FROM gymfleet/terminal:abc\nCOPY codex /opt/gymfleet-agent/bin/codex\n")
    out.seek(0)
    with tarfile.open(fileobj=out) as context:
        assert context.extractfile("codex").read() == binary  # type: ignore[union-attr]
        assert context.getmember("codex").mode == 0o755


def test_a_package_without_the_binary_is_one_line(tmp_path: Path) -> None:
    tgz = package(tmp_path, {"package/package.json": b"{}"})
    with pytest.raises(AgentInstallError, match=r"has no package/vendor/x86_64-unknown-linux-musl/bin/codex") as err:
        build_context(CODEX, tgz, "x86_64", "parent", io.BytesIO())
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("head", "message"), [
    (elf(183), "is built for aarch64, but the Docker host runs x86_64"),
    (b"#!/usr/bin/env node\n" + bytes(40), "is not a Linux executable"),
])
def test_a_binary_for_another_machine_is_one_line(tmp_path: Path, head: bytes, message: str) -> None:
    tgz = package(tmp_path, {CODEX.binary_member("x86_64"): head})
    with pytest.raises(AgentInstallError, match=message) as err:
        build_context(CODEX, tgz, "x86_64", "parent", io.BytesIO())
    assert "\n" not in str(err.value)
    check_binary(elf(62), "x86_64", "ok")  # the host's own machine passes


def test_an_architecture_without_a_package_is_named() -> None:
    with pytest.raises(KeyError, match="codex ships no binary for 'riscv64'"):
        CODEX.npm_spec("riscv64")
