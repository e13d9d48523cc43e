"""`gymfleet train` over a vLLM server it launches itself (``launch: true``): the
learner's adapters are hot-loaded into vLLM, trajectories carry the new policy versions, and a
SIGINT ends the job cleanly, leaving no vLLM process behind."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.trainer.bucket import AdapterBucket
from tests.e2e.train_helpers import tiny_train_config, train_process
from tests.vllm.conftest import alive

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1200)]


async def _versions(store_url: str, run_id: str) -> set[int]:
    async with await TrajectoryStore.open(store_url) as store:
        rows = await store.trajectories(run_id, limit=None)
    return {int(v) for r in rows for v in r.trajectory.versions[r.trajectory.loss_mask.astype(bool)]}


def _vllm_processes(root: psutil.Process) -> list[psutil.Process]:
    found = []
    for p in root.children(recursive=True):
        try:
            if "vllm" in " ".join(p.cmdline()).lower() or p.name().startswith("VLLM"):
                found.append(p)
        except psutil.Error:  # gone meanwhile
            pass
    return found


def test_train_hot_loads_adapters_into_launched_vllm_replicas(vllm_pool: Any, tmp_path: Path) -> None:
    vllm_pool.make_room(1)
    run_id = "vllm-train"
    engines = [{"kind": "vllm", "launch": True, "replicas": 1, "name": "vllm",
                "server": {"max_model_len": 1024, "max_lora_rank": 8}}]
    config = tiny_train_config(tmp_path, run_id, budget={"max_steps": 8}, policy={"engines": engines})
    bucket = AdapterBucket(str(tmp_path / "bucket"), run_id)
    job = train_process(config)
    try:
        deadline = time.monotonic() + 900
        root = psutil.Process(job.pid)
        while len(bucket.versions()) < 3 and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(bucket.versions()) >= 3, job.communicate(timeout=60)[0] if job.poll() is not None else "no publish"
        servers = _vllm_processes(root)  # supervisor, API server, engine core, worker
        commands = [" ".join(p.cmdline()) for p in alive(servers)]
        job.send_signal(signal.SIGINT)  # the learner publishes what it trained, then the job ends
        out, _ = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, out
    assert "parity" not in out.lower() or "likely cause" not in out, out
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    loaded = [load["version"] for load in report["adapter_loads"]]
    assert loaded[:3] == [1, 2, 3], report["adapter_loads"]
    # rollouts started after a version was hot-loaded into vLLM are stamped with it
    assert max(asyncio.run(_versions(str(tmp_path / "store.db"), run_id))) >= 1
    assert len(servers) >= 3, [(p.pid, p.name()) for p in servers]
    api_server = next(c for c in commands if "vllm.entrypoints.openai.api_server" in c and "supervisor" not in c)
    # LoRA slots: max_staleness (the learner's default, 4) + 2, so no version with rollouts in flight is evicted
    assert "--max-loras 6 --max-cpu-loras 6" in api_server and "--logprobs-mode processed_logprobs" in api_server
    deadline = time.monotonic() + 60
    while alive(servers) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive(servers), [(p.pid, p.name()) for p in alive(servers)]
