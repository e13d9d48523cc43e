"""One static batch on the model: merge session caches, prefill only new tokens, decode, split back.

Layout of row i in the batched cache (C = longest cached prefix, N = longest new suffix)::

    [pad (C - c_i)][cached c_i] [pad (N - n_i)][new n_i] [generated ...]

Padding sits in the middle of a row; the 2-D attention mask hides it and explicit
``position_ids`` keep each row's rotary positions contiguous (cached keys already carry theirs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import torch
from transformers import DynamicCache

from gymfleet.core.records import SamplingParams
from gymfleet.core.sampling import sample_token
from gymfleet.orchestrator.engines.kv_cache import SessionCache, SessionCacheStore

BASE_ADAPTER = "__base__"
"""peft's name for "no adapter" in a mixed-adapter batch."""


@dataclass
class BatchRow:
    """One request inside a batch, and what was generated for it."""

    prompt_ids: list[int]
    sampling: SamplingParams
    adapter: str | None
    routing_key: str | None
    max_new_tokens: int
    generator: torch.Generator | None = None
    n_cached: int = 0
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass
class BatchStats:
    """What one batch cost: prompt tokens prefilled and forward passes run."""

    n_prefilled_tokens: int = 0
    n_forward_passes: int = 0


class BatchRunner:
    """Runs batches on one model; called only from the engine's single worker thread."""

    def __init__(self, model: Any, tokenizer: Any, caches: SessionCacheStore, eos_ids: set[int]) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.caches = caches
        self.eos_ids = eos_ids
        self.uses_adapters = False

    @torch.inference_mode()
    def run(self, rows: list[BatchRow]) -> BatchStats:
        """Generates every row to completion (static batching) and stores the session caches."""
        entries = [self.caches.get(row.routing_key) for row in rows]
        for row, entry in zip(rows, entries):
            row.n_cached = entry.usable_prefix(row.prompt_ids, row.adapter) if entry else 0
        n_cached = max(row.n_cached for row in rows)
        n_new = max(len(row.prompt_ids) - row.n_cached for row in rows)
        cache = self._merged_cache(rows, entries, n_cached)
        device = self.model.device  # the model's (model.device); sampling stays on the CPU
        input_ids, positions, mask = (t.to(device) for t in self._prefill_inputs(rows, n_cached, n_new))
        stats = BatchStats(n_prefilled_tokens=sum(len(r.prompt_ids) - r.n_cached for r in rows))
        extra = self._adapter_kwargs(rows)
        active = list(range(len(rows)))
        while active:
            out = self.model(
                input_ids=input_ids, attention_mask=mask, position_ids=positions,
                cache=cache, use_cache=True, logits_to_keep=1, **extra,
            )
            stats.n_forward_passes += 1
            cache = out.cache
            logits = out.logits[:, -1, :].float().cpu()  # float32 logprobs whatever the model's dtype
            next_ids = [self._step_row(rows[i], logits[i]) if i in active else 0 for i in range(len(rows))]
            active = [i for i in active if rows[i].finish_reason is None]
            input_ids = torch.tensor(next_ids, dtype=torch.long, device=device).unsqueeze(1)
            positions = positions[:, -1:] + 1
            mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=mask.dtype, device=device)], dim=1)
        self._store_caches(rows, cache, n_cached, n_new)
        return stats

    def _step_row(self, row: BatchRow, logits: torch.Tensor) -> int:
        token, logprob = sample_token(logits, row.sampling.temperature, row.sampling.top_p, row.generator)
        row.token_ids.append(token)
        row.logprobs.append(logprob)
        if token in self.eos_ids:
            row.finish_reason = "stop"
        elif row.sampling.stop and self._hit_stop(row):
            row.finish_reason = "stop"
        elif len(row.token_ids) >= row.max_new_tokens:
            row.finish_reason = "length"
        return token

    def _hit_stop(self, row: BatchRow) -> bool:
        text = self.tokenizer.decode(row.token_ids)
        return any(stop in text for stop in row.sampling.stop)

    def _adapter_kwargs(self, rows: list[BatchRow]) -> dict[str, Any]:
        if not self.uses_adapters:
            return {}
        return {"adapter_names": [row.adapter or BASE_ADAPTER for row in rows]}

    @staticmethod
    def _merged_cache(rows: list[BatchRow], entries: list[SessionCache | None], n_cached: int) -> DynamicCache:
        if n_cached == 0:
            return DynamicCache()
        template = next(e for r, e in zip(rows, entries) if r.n_cached > 0 and e is not None).layers
        merged = []
        for layer, (k0, v0) in enumerate(template):
            keys = k0.new_zeros((len(rows), k0.shape[1], n_cached, k0.shape[3]))
            values = v0.new_zeros((len(rows), v0.shape[1], n_cached, v0.shape[3]))
            for i, (row, entry) in enumerate(zip(rows, entries)):
                if row.n_cached and entry is not None:
                    k, v = entry.layers[layer]
                    keys[i, :, n_cached - row.n_cached :] = k[0, :, : row.n_cached]
                    values[i, :, n_cached - row.n_cached :] = v[0, :, : row.n_cached]
            merged.append((keys, values))
        return DynamicCache(ddp_cache_data=merged)

    @staticmethod
    def _prefill_inputs(rows: list[BatchRow], n_cached: int, n_new: int) -> tuple[torch.Tensor, ...]:
        batch = len(rows)
        input_ids = torch.zeros(batch, n_new, dtype=torch.long)
        positions = torch.zeros(batch, n_new, dtype=torch.long)
        mask = torch.zeros(batch, n_cached + n_new, dtype=torch.long)
        for i, row in enumerate(rows):
            new = row.prompt_ids[row.n_cached :]
            input_ids[i, n_new - len(new) :] = torch.tensor(new, dtype=torch.long)
            positions[i, n_new - len(new) :] = torch.arange(row.n_cached, len(row.prompt_ids))
            mask[i, n_cached - row.n_cached : n_cached] = 1
            mask[i, n_cached + n_new - len(new) :] = 1
        return input_ids, positions, mask

    def _store_caches(self, rows: list[BatchRow], cache: DynamicCache, n_cached: int, n_new: int) -> None:
        for i, row in enumerate(rows):
            if row.routing_key is None:
                continue
            n_prompt_new = len(row.prompt_ids) - row.n_cached
            n_fed = len(row.token_ids) - 1  # the last sampled token was never fed back
            index = torch.cat([
                torch.arange(n_cached - row.n_cached, n_cached),
                torch.arange(n_cached + n_new - n_prompt_new, n_cached + n_new),
                torch.arange(n_cached + n_new, n_cached + n_new + n_fed),
            ]).to(cache.layers[0].keys.device)
            layers = [
                (layer.keys[i : i + 1].index_select(2, index), layer.values[i : i + 1].index_select(2, index))
                for layer in cast(list[Any], cache.layers)
            ]
            ids = row.prompt_ids + row.token_ids[:n_fed]
            self.caches.put(row.routing_key, SessionCache(ids, row.adapter, layers))
