"""``DockerSandbox.verifier(carry_changes=True)``: the agent's system changes reach the verifier,
its hold on the verifier's tools does not (``envs/sandbox/docker_verifier.py``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker import DockerBackend, DockerSandbox
from gymfleet.envs.sandbox.docker_layer import LayerEntry
from gymfleet.envs.sandbox.docker_verifier import ToolchainRules

RUN_ID = f"test-verifier-{os.getpid()}-{uuid.uuid4().hex[:6]}"
RULES = ToolchainRules.for_image(["PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin", "PYTHONPATH=/app:/opt/lib"], "/app")


def entry(path: str, *, in_image: bool = False, is_dir: bool = False, image_dir: bool = False) -> LayerEntry:
    return LayerEntry(path, "/nonexistent", False, False, in_image, is_dir, image_dir)


@pytest.mark.parametrize(("path", "in_image", "why"), [
    ("/usr/bin/python3.11", True, "an image file in a system code folder"),
    ("/opt/venv/bin/python", True, "an image file in a system code folder"),  # the image's own PATH
    ("/opt/lib/json.py", True, "an image file in a system code folder"),  # and PYTHONPATH
    ("/usr/lib/python3.11/pytest.py", False, "a module in a standard library folder"),
    ("/usr/local/lib/python3.11/dist-packages/x/__pycache__/a.cpython-311.pyc", False, "compiled Python"),
    ("/etc/python3.11/sitecustomize.py", True, "a Python start-up hook"),
    ("/usr/local/lib/python3.11/dist-packages/usercustomize.py", False, "a Python start-up hook"),
    ("/conftest.py", False, "pytest's configuration at the filesystem root (pytest reads it above /tests)"),
    ("/answer.txt", False, None),  # a file at / is the agent's answer, not the verifier's configuration
    ("/etc/ld.so.preload", False, "configuration of the verifier's tools"),
    ("/etc/apt/apt.conf.d/99hook", False, "configuration of the verifier's tools"),
    ("/root/.bashrc", True, "a start-up or configuration file of a home folder"),
    ("/root/.local/bin/uvx", True, "a start-up or configuration file of a home folder"),
    ("/root/.cache/uv/archive-v0/x/pytest/__init__.py", False, "a start-up or configuration file of a home folder"),
    ("/root/.ssh/authorized_keys", True, None),  # a key-revocation task's answer is graded as written
    ("/home/dev/.config/myapp/settings.json", False, None),
    ("/home/dev/.config/uv/uv.toml", False, "a start-up or configuration file of a home folder"),
    ("/usr/local/bin/mytool", False, None),  # new, shadowing nothing (checked in the image later)
    ("/etc/nginx/nginx.conf", True, None),
    ("/app/solution.py", True, None),  # the workdir is the agent's, PYTHONPATH or not
    ("/app/sitecustomize.py", False, None),
    ("/srv/data.txt", False, None),
])
def test_rules_keep_the_toolchain_and_nothing_else(path: str, in_image: bool, why: str | None) -> None:
    assert RULES.reason(entry(path, in_image=in_image)) == why


VENV = "/opt/venv/lib/python3.13/site-packages"


@pytest.mark.parametrize(("path", "in_image", "why"), [
    # a venv the image made, whose bin/ is on PATH: pytest's own code, patched to os._exit(0)
    (f"{VENV}/pytest/__init__.py", True, "an image file in a Python import folder"),
    (f"{VENV}/_pytest/main.py", True, "an image file in a Python import folder"),
    ("/srv/tools/lib/python3.12/site-packages/pluggy/_hooks.py", True, "an image file in a Python import folder"),
    ("/opt/conda/lib/python3.11/json/__init__.py", True, "an image file in a Python import folder"),
    ("/opt/conda/lib/python3.11/pytest.py", False, "a module in a standard library folder"),
    (f"{VENV}/_pytest/__pycache__/main.cpython-313.pyc", False, "compiled Python"),
    # a path-only .pth appends a folder to sys.path (one holding a sitecustomize.py, say)
    (f"{VENV}/zz.pth", False, "a .pth file (Python's site module reads it at start-up)"),
    ("/usr/lib/python3/dist-packages/distutils-precedence.pth", True,
     "a .pth file (Python's site module reads it at start-up)"),
    (f"{VENV}/newpkg/__init__.py", False, None),  # new, shadowing nothing (checked in the image later)
    ("/opt/venv/pyvenv.cfg", True, None),  # not an import folder, not on PATH
    ("/app/.venv/lib/python3.13/site-packages/pytest/__init__.py", True, None),  # the workdir is the agent's
    ("/app/x.pth", False, None),
])
def test_every_python_import_folder_is_the_verifiers(path: str, in_image: bool, why: str | None) -> None:
    assert RULES.reason(entry(path, in_image=in_image)) == why


def test_the_folders_above_a_package_folder_are_judged_by_their_entries() -> None:
    for folder in ("/opt/venv/lib/python3.13", VENV, "/usr/lib/python3.13", f"{VENV}/pytest"):
        assert RULES.reason(entry(folder, in_image=True, is_dir=True, image_dir=True)) is None, folder
    assert RULES.reason(entry("/opt/venv/lib/python3.13", is_dir=True)) is None  # a venv the agent made


def test_new_modules_in_any_site_folder_are_checked_for_shadowing() -> None:
    patterns = RULES.shadow_patterns(entry(f"{VENV}/pytest.cpython-313-x86_64-linux-gnu.so"))
    assert f"{VENV}/pytest.py" in patterns and f"{VENV}/pytest" in patterns


def test_a_folder_of_the_image_holding_changes_is_judged_by_its_entries() -> None:
    assert RULES.reason(entry("/usr/bin", in_image=True, is_dir=True, image_dir=True)) is None
    opaque = LayerEntry("/usr/lib/x", "/nonexistent", False, True, True, True, True)  # deleted and made again
    assert RULES.reason(opaque) == "an image file in a system code folder"


def test_new_commands_and_modules_are_checked_for_shadowing() -> None:
    assert RULES.shadow_patterns(entry("/usr/local/bin/python3")) == [
        "/opt/venv/bin/python3", "/usr/local/bin/python3", "/usr/bin/python3", "/bin/python3"]
    assert "/usr/lib/python3/dist-packages/pytest.py" in RULES.shadow_patterns(
        entry("/usr/local/lib/python3.11/dist-packages/pytest"))
    assert RULES.shadow_patterns(entry("/usr/local/lib/python3.11/dist-packages/pytest-8.4.1.dist-info")) == []
    assert RULES.shadow_patterns(entry("/srv/python3")) == []


@pytest.fixture(scope="module")
def backend(docker_available: bool) -> Iterator[DockerBackend]:
    backend = DockerBackend()
    yield backend
    backend._gc_sync(RUN_ID, expired_only=False)


@pytest.fixture
async def sandbox(backend: DockerBackend, terminal_image: str) -> AsyncIterator[DockerSandbox]:
    async with backend.create(SandboxSpec(image=terminal_image, memory_mb=256, disk_mb=64),
                              SandboxLabels(run_id=RUN_ID)) as sb:
        yield sb


AGENT = """
set -e
echo conf > /etc/app.conf && ln -s /etc/app.conf /srv/link
printf '#!/bin/sh\\necho mytool\\n' > /usr/local/bin/mytool && chmod +x /usr/local/bin/mytool
rm /etc/debian_version
rm -rf /etc/skel && mkdir /etc/skel && echo new > /etc/skel/new
echo work > answer.txt && echo scratch > /tmp/scratch
cp /bin/true "$(readlink -f "$(command -v python3)")"
printf '#!/bin/sh\\necho forged\\n' > /usr/local/bin/ls && chmod +x /usr/local/bin/ls
echo 'export X=1' >> /root/.bashrc
sleep 600 &
"""


async def test_the_fresh_verifier_holds_the_agents_work_and_the_images_tools(sandbox: DockerSandbox) -> None:
    assert (await sandbox.exec(AGENT)).ok
    verifier = await sandbox.verifier(carry_changes=True)  # stops the agent's sleep itself, first
    try:
        assert verifier is not sandbox and await sandbox.stop_processes() == []
        check = await verifier.exec(
            "cat /etc/app.conf /srv/link answer.txt /tmp/scratch /etc/skel/new; mytool; ls /etc/skel; "
            "test -e /etc/debian_version || echo deleted; python3 -c 'print(6 * 7)'; "
            "command -v ls; grep -c 'export X=1' /root/.bashrc || true")
        assert check.stdout.split() == ["conf", "conf", "work", "scratch", "new", "mytool", "new", "deleted", "42",
                                        "/usr/bin/ls", "0"], check
        assert set(verifier.withheld) >= {"/usr/local/bin/ls", "/root/.bashrc"}
        assert any(p.startswith("/usr/bin/python3") for p in verifier.withheld), verifier.withheld
    finally:
        await verifier.close()


async def test_an_agent_that_left_the_toolchain_alone_is_verified_in_place(sandbox: DockerSandbox) -> None:
    assert (await sandbox.exec("echo conf > /etc/app.conf && echo work > answer.txt")).ok
    await sandbox.stop_processes()
    assert await sandbox.verifier(carry_changes=True) is sandbox
