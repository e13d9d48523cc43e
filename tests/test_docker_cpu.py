"""benchmarks/docker_cpu.py: cgroup accounting files read, and the Docker CPU split between two snapshots."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def docker_cpu():
    sys.path.insert(0, str(BENCHMARKS))  # it imports cpu_stages beside it, as the scripts do
    try:
        spec = importlib.util.spec_from_file_location("docker_cpu", BENCHMARKS / "docker_cpu.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["docker_cpu"] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
        sys.modules.pop("docker_cpu", None)
    return module


def test_cgroup_files_read_in_seconds(docker_cpu) -> None:
    v2 = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n"
    assert docker_cpu.cgroup_cpu_s("cpu.stat", v2) == 2.5
    assert docker_cpu.cgroup_cpu_s("cpuacct.usage", "1500000000\n") == 1.5
    with pytest.raises(ValueError, match="usage_usec"):
        docker_cpu.cgroup_cpu_s("cpu.stat", "user_usec 1\n")


def test_split_counts_exec_processes_once_and_new_containers_from_zero(docker_cpu) -> None:
    C, P, S = docker_cpu.ContainerCpu, docker_cpu.ProcCpu, docker_cpu.Snapshot
    before = S(containers={"a": C(10.0, 1.0)},
               procs={(1, 100): P("shim", 1.0, 20.0), (2, 5): P("dockerd", 50.0, 0.0), (4, 6): P("containerd", 5.0, 1.0)},
               meter_s=0.1)
    # a: 4 s of docker exec processes, all reaped by its shim, which also reaped 0.8 s of runc.
    # b started in the window: 3 s in its cgroup, 1 s of it still live (its PID 1), 2 s reaped by
    # its shim with 0.4 s of runc.
    after = S(containers={"a": C(14.0, 1.0), "b": C(3.0, 1.0)},
              procs={(1, 100): P("shim", 1.5, 24.8), (3, 200): P("shim", 0.2, 2.4),
                     (2, 5): P("dockerd", 52.0, 0.0), (4, 6): P("containerd", 6.0, 1.1)},
              meter_s=0.6, other_containers=2, execs=30)
    got = docker_cpu.per_rollout(before, after, orchestrator_s=3.0, n=5)
    assert got["docker_daemon_parts_s_per_rollout"] == pytest.approx(
        {"dockerd": 0.4, "containerd": 0.22, "shims": 0.14, "runc_via_shims": 0.24})
    assert got["docker_cpu_s_per_rollout"] == pytest.approx(
        {"orchestrator": 0.6, "containers": 1.4, "docker_daemon": 1.0, "total": 3.0})
    assert got["docker_meter_reads_s_per_rollout"] == pytest.approx(0.1)
    assert got["other_containers_at_start_and_end"] == [0, 2] and got["docker_execs_per_rollout"] == 6
    assert docker_cpu.per_rollout(before, after, 3.0, 0) == {}


def test_container_cgroup_folders_are_told_apart(docker_cpu) -> None:
    cid = "0123456789abcdef" * 4
    assert docker_cpu._is_container(cid) and docker_cpu._is_container(f"docker-{cid}.scope")
    assert not docker_cpu._is_container("cron.service") and not docker_cpu._is_container("cgroup.procs")
