"""`gymfleet serve --backend vllm`: a real bfloat16 server, which the start-up parity check
refuses against the float32 learner (naming the dtype), and which dies with the CLI process when
that is SIGKILLed (no orphan engine process)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest

from gymfleet.orchestrator.config import PolicyConfig
from gymfleet.orchestrator.engines.vllm_launcher import free_port
from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator.policy import open_gateway
from gymfleet.core.records import SamplingParams
from tests.e2e.train_helpers import ROOT
from tests.vllm.conftest import alive

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.timeout(900)]


async def test_bf16_server_is_refused_and_dies_with_the_cli(vllm_pool: Any) -> None:
    vllm_pool.make_room(1)
    port = free_port()
    cli = subprocess.Popen([sys.executable, "-m", "gymfleet.cli", "serve", "--backend", "vllm", "--dtype", "bfloat16",
                            "--port", str(port), "--max-context-tokens", "2048"],
                           cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        while cli.poll() is None and not (lines and lines[-1].startswith("ready:")):
            lines.append(cli.stdout.readline())
        assert lines and lines[-1].startswith(f"ready: http://127.0.0.1:{port}"), "".join(lines)
        tree = psutil.Process(cli.pid).children(recursive=True)
        assert any("VLLM::" in p.name() or "EngineCore" in " ".join(p.cmdline()) for p in tree), [p.name() for p in tree]

        policy = PolicyConfig(engines=[{"kind": "vllm", "base_url": f"http://127.0.0.1:{port}", "model": "smollm2-135m"}])
        with pytest.raises(ConfigError, match=r"policy.parity: .*ratio .*likely cause: dtype.*--dtype float32") as info:
            async with open_gateway(policy, "bf16", sampling=SamplingParams(temperature=1.0)):
                pass
        assert "\n" not in str(info.value)
    finally:
        cli.kill()  # SIGKILL: no chance to clean up; the supervisor must
        cli.wait()
    deadline = time.monotonic() + 60
    while alive(tree) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive(tree), [(p.pid, p.name()) for p in alive(tree)]
