"""The text of each token of a trajectory, from the tokenizer of the model the run served.

The store keeps token ids only; showing them as text needs the run's tokenizer
(``policy.model`` of its config). It is loaded once per model, off the event loop, on the first
trajectory page that needs it; where it cannot be loaded (no ``transformers``, a model not on this
machine) the page shows ids, and says why.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from gymfleet.core.models import ModelSpec, load_tokenizer


class TokenDecoder(Protocol):
    """Turns a run's token ids into the text of each token (the viewer's one seam to a tokenizer)."""

    async def pieces(self, config: dict[str, Any], token_ids: list[int]) -> tuple[list[str] | None, str]:
        """Called for each trajectory page: the text of each token of ``token_ids`` (same length),
        or None and the reason when the run's tokenizer is not available here."""
        ...


class RunTokenizer:
    """A :class:`TokenDecoder` over the tokenizer of each run's ``policy.model`` (cached per model)."""

    def __init__(self) -> None:
        self._tokenizers: dict[ModelSpec, Any] = {}
        self._failures: dict[ModelSpec, str] = {}
        self._lock = asyncio.Lock()

    async def pieces(self, config: dict[str, Any], token_ids: list[int]) -> tuple[list[str] | None, str]:
        try:
            spec = ModelSpec.model_validate(((config.get("policy") or {}).get("model")))
        except ValueError as exc:
            return None, f"the run's policy.model cannot be read: {str(exc).splitlines()[0]}"
        tokenizer = await self._tokenizer(spec)
        if tokenizer is None:
            return None, self._failures[spec]
        return [tokenizer.decode([t]) for t in token_ids], ""

    async def _tokenizer(self, spec: ModelSpec) -> Any:
        async with self._lock:
            if spec not in self._tokenizers and spec not in self._failures:
                try:
                    self._tokenizers[spec] = await asyncio.to_thread(load_tokenizer, spec)
                except Exception as exc:  # any loader failure only costs the page its token text
                    self._failures[spec] = f"tokenizer of {spec} not loadable here ({type(exc).__name__}): ids shown"
            return self._tokenizers.get(spec)


class IdsOnly:
    """A :class:`TokenDecoder` that never loads a tokenizer (``gymfleet view --token-ids``)."""

    async def pieces(self, config: dict[str, Any], token_ids: list[int]) -> tuple[list[str] | None, str]:
        return None, "token ids shown (--token-ids)"
