"""The engine configs a policy lists: one per engine kind, a union told apart by ``kind``.

``policy.engines: [{kind: transformers, max_batch_size: 4}, {kind: vllm, base_url: ..., model: ...}]``
validates each item against the config of its kind (an item without ``kind`` is a
``transformers`` one), strictly: an unknown key is an error naming the nearest valid key. A new
engine kind adds its config class (with ``kind: Literal["<kind>"]``) to :data:`EngineConfig`
and its builder to ``orchestrator/policy.py``'s ``ENGINE_BUILDERS``.

This module imports no torch: loading a config stays cheap.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from gymfleet.core.models import ModelSpec
from gymfleet.core.strict import StrictModel
from gymfleet.orchestrator.engines.vllm import VLLMEngineConfig

DEFAULT_KIND = "transformers"


class TransformersEngineConfig(StrictModel):
    """Settings of one in-process engine replica (``kind: transformers``)."""

    kind: Literal["transformers"] = "transformers"
    """Selects this engine in ``policy.engines``."""
    name: str = "local"
    """Replica name, reported in every Generation; in a policy, ``local-<index>`` by default."""
    source: ModelSpec = Field(default_factory=ModelSpec)
    """Which weights to load; in a policy, ``policy.model`` (a different one is refused)."""
    max_batch_size: int = Field(default=16, ge=1)
    """Most requests sharing one forward pass."""
    batch_window_ms: float = Field(default=5.0, ge=0.0)
    """How long the first queued request waits for others to join its batch."""
    max_cached_sessions: int = Field(default=256, ge=0)
    """Sessions whose KV cache is kept (LRU); 0 disables session caching."""
    max_cached_tokens: int | None = Field(default=65536, ge=1)
    """Most tokens held in session caches (LRU eviction beyond); None = unbounded."""
    max_context_tokens: int | None = None
    """Context window in tokens; None = the model's ``max_position_embeddings``."""
    max_adapters: int = Field(default=8, ge=0)
    """Most LoRA adapters loaded at once; loading more fails (free one with unload first)."""
    n_threads: int | None = None
    """torch intra-op threads; None keeps torch's default."""


def engine_kind(value: Any) -> str | None:
    """The ``kind`` of an engine config or of its raw mapping (``transformers`` when missing)."""
    if isinstance(value, dict):
        return value.get("kind", DEFAULT_KIND)
    return getattr(value, "kind", None)


EngineConfig = Annotated[
    Annotated[TransformersEngineConfig, Tag("transformers")] | Annotated[VLLMEngineConfig, Tag("vllm")],
    Discriminator(engine_kind),
]
"""Any engine's config, told apart by ``kind``."""
