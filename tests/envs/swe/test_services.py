"""Local services in the grading sandbox (envs/swe/services.py): psf/requests' specs name a local
httpbin answering for httpbin.org and a tarpit for 10.255.255.1; httpbin lives in its own venv,
both start (bounded, loudly) only in the grading sandbox, and a fixture instance whose tests call
http(s)://httpbin.org and time out on 10.255.255.1 resolves offline."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker_container import container_options
from gymfleet.envs.swe import services
from gymfleet.envs.swe.environment import EnvPlan
from gymfleet.envs.swe.errors import SpecNotFoundError
from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig
from gymfleet.envs.swe.images import ImageRef
from gymfleet.envs.swe.image_scripts import setup_env_script
from gymfleet.envs.swe.instances import SWEInstance, load_instances
from gymfleet.envs.swe.specs import DRIFT_SPECS, load_spec

BASE = load_instances("fixtures")[0]  # python-semver__python-semver-426


def test_every_lite_requests_spec_names_httpbin_by_default(lite_rows: list[dict[str, Any]]) -> None:
    versions = {r["version"] for r in lite_rows if r["repo"] == "psf/requests"}
    assert versions
    for version in versions:
        spec = load_spec("psf/requests", version, [DRIFT_SPECS])
        assert spec.services == ["httpbin", "tarpit"]
        assert spec.overrides == {"services": ["httpbin", "tarpit"]}  # shown as spec_overrides
    assert load_spec("pallets/flask", "2.0", [DRIFT_SPECS]).services == []


def test_a_users_table_keeps_the_default_services(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("psf/requests:\n  '2.4':\n    test_cmd: pytest -rA -x\n")
    spec = load_spec("psf/requests", "2.4", [mine, DRIFT_SPECS])
    assert spec.test_cmd == "pytest -rA -x" and spec.services == ["httpbin", "tarpit"]
    assert spec.source == f"{mine} + {DRIFT_SPECS}"


def test_an_unknown_service_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    table = tmp_path / "t.yaml"
    table.write_text("psf/requests:\n  '2.4':\n    services: [postbin]\n")
    with pytest.raises(SpecNotFoundError, match="unknown service.*postbin.*known: httpbin, tarpit"):
        load_spec("psf/requests", "2.4", [table])


def test_httpbin_goes_into_its_own_venv_never_the_instances_environment() -> None:
    spec = load_spec("psf/requests", "2.4", [DRIFT_SPECS])
    script = setup_env_script(spec, EnvPlan())
    home = services.HTTPBIN.home
    assert f"python -m venv {home}" in script
    installs = [line for line in script.splitlines() if "pip install" in line and "httpbin==" in line]
    assert installs and all(line.startswith(f"{home}/bin/python -m pip install") for line in installs)
    assert all("==" in r for r in services.HTTPBIN_REQUIREMENTS)  # pinned
    plain = setup_env_script(load_spec("psf/requests", "2.4"), EnvPlan())
    assert "httpbin" not in plain  # only specs that name it


def test_the_grading_sandbox_alone_gets_net_admin_and_trusts_the_local_ca() -> None:
    wanted = services.resolve(load_spec("psf/requests", "2.4", [DRIFT_SPECS]).services)
    assert services.needs_net_admin(wanted) and not services.needs_net_admin([services.HTTPBIN])
    script = services.start_script(wanted)
    assert "ip route replace 10.255.255.1/32 dev lo" in script
    # requests verifies against its own cacert.pem (or certifi's), not the environment's
    assert "f=/testbed/requests/cacert.pem; if" in script and '"$s"/certifi/cacert.pem' in script
    assert "echo '127.0.0.1 httpbin.org' >> /etc/hosts" in script
    harness = SWEHarness(SWEHarnessConfig())
    image = ImageRef("gymfleet/swe-instance.x:1", "local", "gymfleet", 0.0)
    assert not harness.sandbox(image).spec.net_admin  # what SWE-v0's agent gets
    assert harness.sandbox(image, net_admin=True).spec.net_admin
    labels = SandboxLabels()
    granted = container_options(SandboxSpec(net_admin=True), labels, quota=False, tmpfs_workdir=False)
    assert granted["cap_add"] == ["NET_ADMIN"] and granted["network_mode"] == "none"
    assert "cap_add" not in container_options(SandboxSpec(), labels, quota=False, tmpfs_workdir=False)


def _fake(tmp_path: Path, code: str) -> services.Service:
    """A service whose server runs ``python -c code`` from ``tmp_path`` (no hosts: the host's
    /etc/hosts is not touched)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    svc = services.Service("fake", servers=(services.Server(port, ("-c", code)),), root=str(tmp_path))
    (tmp_path / "fake/bin").mkdir(parents=True)
    (tmp_path / "fake/bin/python").symlink_to(sys.executable)
    return svc


def _run(script: str) -> tuple[int, str]:
    async def go() -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec("bash", "-c", script, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        return proc.returncode or 0, out.decode()
    return asyncio.run(go())


def test_a_server_that_dies_is_an_error_quoting_its_log(tmp_path: Path) -> None:
    rc, out = _run(services.start_script([_fake(tmp_path, "raise SystemExit('no port for me')")], 10))
    assert rc == 1
    assert "fake on port" in out and "exited before listening" in out and "no port for me" in out


def test_a_server_that_never_listens_fails_within_the_bound(tmp_path: Path) -> None:
    rc, out = _run(services.start_script([_fake(tmp_path, "import time; time.sleep(30)")], 1))
    assert rc == 1 and "did not listen within 1 s" in out


# ---- in Docker: a fixture instance whose tests call http(s)://httpbin.org ----

HTTPBIN_TESTS = '''import json
import socket
import urllib.request

import pytest


def test_http_get():
    with urllib.request.urlopen("http://httpbin.org/get?x=1", timeout=20) as r:
        assert json.load(r)["args"] == {"x": "1"}


def test_https_get_verified():  # the default context: the system's CA bundle
    with urllib.request.urlopen("https://httpbin.org/status/200", timeout=20) as r:
        assert r.status == 200


def test_tarpit_connect_times_out():
    with pytest.raises(socket.timeout):
        socket.create_connection(("10.255.255.1", 80), timeout=0.5)
'''
HTTPBIN_IDS = ["tests/test_httpbin.py::test_http_get", "tests/test_httpbin.py::test_https_get_verified",
               "tests/test_httpbin.py::test_tarpit_connect_times_out"]
# the fixture's spec, plus the service
SPEC_TABLE = """python-semver/python-semver:
  "3.0-httpbin":
    python: "3.11"
    pip_packages: ["pytest==9.2.0", "pytest-cov==7.1.0", "packaging==26.4"]
    install: "python -m pip install --no-build-isolation -e ."
    pre_install: ["python -m pip install setuptools==84.2.1 wheel"]
    test_cmd: "pytest --no-header -rA --tb=short -p no:cacheprovider --color=no"
    log_parser: parse_log_pytest
    services: [httpbin, tarpit]
"""


def _new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


def _instance() -> SWEInstance:
    return BASE.model_copy(update={
        "instance_id": "net__httpbin-1", "version": "3.0-httpbin",
        "test_patch": BASE.test_patch + _new_file("tests/test_httpbin.py", HTTPBIN_TESTS),
        "PASS_TO_PASS": [*BASE.PASS_TO_PASS, *HTTPBIN_IDS]})


@pytest.mark.docker
def test_gold_resolves_offline_with_a_local_httpbin(docker_available: bool, tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text(json.dumps(_instance().row()) + "\n")
    (tmp_path / "specs.yaml").write_text(SPEC_TABLE)
    args = ["eval", "swebench", "--dataset", str(tmp_path / "d.jsonl"), "--predictions", "gold",
            "--spec-table", str(tmp_path / "specs.yaml"), "--run-id", "net", "--output-dir",
            str(tmp_path), "--no-clone", "--timeout", "300"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "gold.net.json").read_text())
    folder = tmp_path / "logs/run_evaluation/net/gold/net__httpbin-1"
    log = (folder / "test_output.txt").read_text()
    assert summary["resolved_ids"] == ["net__httpbin-1"], (summary, log[-3000:])
    report = json.loads((folder / "report.json").read_text())["net__httpbin-1"]
    assert report["services"] == ["httpbin", "tarpit"]
    assert set(HTTPBIN_IDS) <= set(report["tests_status"]["PASS_TO_PASS"]["success"])
    assert "gymfleet services: ready" in log


@pytest.mark.docker
def test_the_agents_sandbox_has_no_httpbin(docker_available: bool, tmp_path: Path) -> None:
    table = tmp_path / "specs.yaml"
    table.write_text(SPEC_TABLE)
    harness = SWEHarness(SWEHarnessConfig(spec_tables=[table], allow_clone=False))
    instance = _instance()

    async def probe() -> tuple[str, str]:
        image = await harness.provision(instance)  # the image the agent's episode runs in
        async with harness.sandbox(image) as sandbox:  # SWE-v0 takes its spec from here
            installed = await sandbox.exec(f"test -x {services.HTTPBIN.home}/bin/python && echo yes")
            reach = await sandbox.exec(
                "getent hosts httpbin.org || echo no-name; "
                "(exec 3<>/dev/tcp/127.0.0.1/80) 2>/dev/null && echo listening || echo closed; "
                "ip route replace 10.255.255.1/32 dev lo 2>/dev/null && echo routed || echo refused")
        return installed.stdout, reach.stdout

    installed, reach = asyncio.run(probe())
    assert installed.strip() == "yes"  # in the image, outside /testbed
    assert "no-name" in reach and "closed" in reach  # but not resolvable nor running
    assert "refused" in reach  # no CAP_NET_ADMIN outside grading
