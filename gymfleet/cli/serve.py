"""`gymfleet serve`: one inference replica behind vLLM's HTTP subset: a real vLLM server
(``--backend vllm``, see docs/vllm.md) or the embedded engine (``--backend embedded``, the
default, for machines without vLLM; engines/server.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.text import Text

from gymfleet.core.models import ModelSpec

if TYPE_CHECKING:
    from gymfleet.orchestrator import VLLMServer

console = Console(stderr=True)


class Backend(str, Enum):
    embedded = "embedded"
    vllm = "vllm"


def serve(
    backend: Backend = typer.Option(Backend.embedded, help="embedded: the in-process engine; vllm: a real vLLM server."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, help="TCP port (0: a free one, vllm only)."),
    model: str = typer.Option("embedded", help="'embedded' (SmolLM2-135M GGUF), a model directory or id."),
    gguf_file: str | None = typer.Option(None, help="GGUF file inside --model, if any (embedded backend)."),
    served_model_name: str = typer.Option("smollm2-135m", help="Base model name in requests' `model`."),
    name: str | None = typer.Option(None, help="Replica name (default host:port; embedded backend)."),
    max_batch_size: int = typer.Option(16, help="Most requests per forward pass (embedded backend)."),
    batch_window_ms: float = typer.Option(5.0, help="How long a request waits for others to batch with (embedded)."),
    max_adapters: int = typer.Option(8, help="Most LoRA adapters loaded at once (vllm: LoRA slots)."),
    max_context_tokens: int | None = typer.Option(None, help="Context window (default: the model's; vllm: 4096)."),
    threads: int = typer.Option(1, help="Compute threads (torch intra-op / vLLM's OpenMP threads, each on a core)."),
    dtype: str = typer.Option("float32", help="vllm: float32, bfloat16, float16 or auto."),
    max_lora_rank: int = typer.Option(16, help="vllm: largest LoRA rank accepted (1, 8, 16, 32, 64...)."),
    kv_cache_gib: int = typer.Option(1, help="vllm: KV cache in GiB."),
    cpu_ids: str | None = typer.Option(None, help="vllm: cores for its threads (e.g. 0-1; default: the first ones)."),
    adapter_cache: str | None = typer.Option(None, help="embedded: a folder where adapters given as fsspec URLs "
                                             "(s3://..., file://...) are copied before they load; unset: paths only."),
    admin_token_file: Path = typer.Option(
        Path("~/.config/gymfleet/serve-admin-token"), help="embedded: the token load/unload requests must carry "
        "(Authorization: Bearer); created (mode 0600, random) when missing. Clients: engine admin_token."),
    admin_socket: Path | None = typer.Option(
        None, help="embedded: the unix socket (mode 0600) where load/unload are served; the TCP port serves "
        "no admin route. Default: serve-<port>.sock beside --admin-token-file. Clients: engine admin_socket."),
) -> None:
    """Serve one replica over HTTP (completions with token ids and logprobs, LoRA load/unload, health)."""
    if backend is Backend.vllm:
        _serve_vllm(host=host, port=port, model=model, served_model_name=served_model_name, dtype=dtype,
                    max_loras=max_adapters, max_model_len=max_context_tokens or 4096, threads=threads,
                    max_lora_rank=max_lora_rank, kv_cache_gib=kv_cache_gib, cpu_ids=cpu_ids)
        return
    from gymfleet.orchestrator import (
        TransformersEngine, TransformersEngineConfig, build_admin_app, build_app, serve_listeners)

    config = TransformersEngineConfig(
        name=name or f"{host}:{port}", source=ModelSpec(name_or_path=model, gguf_file=gguf_file),
        max_batch_size=max_batch_size, batch_window_ms=batch_window_ms, max_adapters=max_adapters,
        max_context_tokens=max_context_tokens, n_threads=threads,
    )
    token = _admin_token(admin_token_file.expanduser())
    admin_path = (admin_socket or admin_token_file.parent / f"serve-{port}.sock").expanduser()
    tcp, sock = _bind(host, port, admin_path)
    engine = TransformersEngine(config)
    cache = Path(adapter_cache) if adapter_cache else None
    console.print(f"admin routes (load/unload adapter) on unix socket {admin_path}, with the token in "
                  f"{admin_token_file}", markup=False, highlight=False, soft_wrap=True)
    asyncio.run(serve_listeners(build_app(engine, served_model_name, admin=False),
                                build_admin_app(engine, adapter_cache=cache, admin_token=token), tcp, sock))


def _bind(host: str, port: int, admin_path: Path) -> tuple[socket.socket, socket.socket]:
    """The inference port's and the admin listener's sockets, bound before the model loads; one
    line and exit 2 when either cannot be had."""
    from gymfleet.orchestrator import ReplicaLaunchError, bind_admin_socket, bind_inference_socket

    try:
        tcp = bind_inference_socket(host, port)
    except ReplicaLaunchError as exc:
        console.print(Text("error: ", style="red") + Text(str(exc)), soft_wrap=True)
        raise typer.Exit(2) from exc
    try:
        return tcp, bind_admin_socket(admin_path)
    except ReplicaLaunchError as exc:
        tcp.close()
        console.print(Text("error: ", style="red") + Text(str(exc)), soft_wrap=True)
        raise typer.Exit(2) from exc


def _admin_token(path: Path) -> str:
    """The token in ``path``, written there first (random, mode 0600) when the file is missing.

    Raises:
        typer.Exit: (2) the file cannot be read or written, or is empty.
    """
    import secrets

    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(32) + "\n")
        token = path.read_text().strip()
    except OSError as exc:
        console.print(Text("error: ", style="red") + Text(f"admin token file {path}: {exc.strerror or exc}: "
                                                          "pass --admin-token-file with a writable path"))
        raise typer.Exit(2) from exc
    if not token:
        console.print(Text("error: ", style="red") + Text(f"admin token file {path} is empty: write a token in it"))
        raise typer.Exit(2)
    return token


def _serve_vllm(model: str, **flags: Any) -> None:
    """Starts a supervised vLLM server, prints where it listens, and stops it on SIGINT/SIGTERM."""
    from pydantic import ValidationError

    from gymfleet.core.strict import validation_problems
    from gymfleet.orchestrator import ReplicaLaunchError
    from gymfleet.core.models import resolve_model_dir
    from gymfleet.orchestrator import VLLMServer, VLLMServerConfig

    try:
        config = VLLMServerConfig(model=None if model == "embedded" else model, **flags)
        server = VLLMServer(config, model_dir=resolve_model_dir(ModelSpec(name_or_path=model)))
        asyncio.run(_run_until_signal(server))
    except ValidationError as exc:
        console.print(Text("error: ", style="red") + Text(f"vllm server flags: {validation_problems(exc)}"), soft_wrap=True)
        raise typer.Exit(2) from exc
    except ReplicaLaunchError as exc:
        console.print(Text("error: ", style="red") + Text(str(exc)), soft_wrap=True)
        raise typer.Exit(2) from exc


async def _run_until_signal(server: VLLMServer) -> None:
    """Serves until SIGINT/SIGTERM (then stops the server); a server that dies is an error."""
    from gymfleet.orchestrator import ReplicaLaunchError

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server.start()  # raises at once when vLLM is not installed
    console.print(f"starting vLLM ({server.served_model_name}) on {server.base_url}; log {server.log_path}",
                  markup=False, highlight=False, soft_wrap=True)
    async with server:
        print(f"ready: {server.base_url} serving {server.served_model_name} (supervisor pid {server.pid})", flush=True)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=2.0)
            except TimeoutError:
                if not server.alive():
                    raise ReplicaLaunchError(f"vLLM server {server.base_url} exited: {server.log_tail()}") from None
    console.print("vLLM server stopped")
