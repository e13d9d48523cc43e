"""`gymfleet serve`: one TransformersEngine replica behind the vLLM HTTP subset (see engines/server.py)."""

from __future__ import annotations

import typer

from gymfleet.core.models import ModelSpec


def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, help="TCP port."),
    model: str = typer.Option("embedded", help="'embedded' (SmolLM2-135M GGUF), a model directory or id."),
    gguf_file: str | None = typer.Option(None, help="GGUF file inside --model, if any."),
    served_model_name: str = typer.Option("smollm2-135m", help="Base model name in requests' `model`."),
    name: str | None = typer.Option(None, help="Replica name (default host:port)."),
    max_batch_size: int = typer.Option(16, help="Most requests per forward pass."),
    batch_window_ms: float = typer.Option(5.0, help="How long a request waits for others to batch with."),
    max_adapters: int = typer.Option(8, help="Most LoRA adapters loaded at once."),
    max_context_tokens: int | None = typer.Option(None, help="Context window (default: the model's)."),
    threads: int | None = typer.Option(None, help="torch threads (default: torch's choice)."),
) -> None:
    """Serve the embedded engine over HTTP, so that VLLMEngine (and the router) can use it."""
    import uvicorn

    from gymfleet.orchestrator.engines.server import build_app
    from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig

    config = TransformersEngineConfig(
        name=name or f"{host}:{port}", source=ModelSpec(name_or_path=model, gguf_file=gguf_file),
        max_batch_size=max_batch_size, batch_window_ms=batch_window_ms, max_adapters=max_adapters,
        max_context_tokens=max_context_tokens, n_threads=threads,
    )
    engine = TransformersEngine(config)
    uvicorn.run(build_app(engine, served_model_name), host=host, port=port, log_level="warning")
