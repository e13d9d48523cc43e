"""The running batch on one model (continuous batching): rows join between decode steps and leave as they finish.

Layout of row i in the running cache (L columns; every row's newest token sits in the last one)::

    [pad][cached c_i][pad][new prompt n_i][fed generated tokens ...]

Padding sits on the left and between a row's cached prefix and its new prompt tokens; the 2-D
attention mask (B, L) hides it and explicit ``position_ids`` keep each row's rotary positions
contiguous (cached keys already carry theirs). Rows that join are prefilled in one forward pass
of their own (rows with the same prompt, adapter and cached prefix length, such as the samples
of a group, prefill it once), then padded on the left to the running length. A row leaves the
batch as soon as it finishes; its keys and values (the columns its mask marks, in order) become
its session's cache. Leading columns that no row uses any more are cut.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from gymfleet.core.records import SamplingParams
from gymfleet.core.sampling import sample_token
from gymfleet.orchestrator.engines.kv_cache import SessionCache, SessionCacheStore

BASE_ADAPTER = "__base__"
"""peft's name for "no adapter" in a mixed-adapter batch."""

Layers = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer ``(keys, values)``, each of shape (B, H_kv, L, D)."""


@dataclass(eq=False)
class BatchRow:
    """One request inside the running batch, and what was generated for it (compared by identity)."""

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
    """What one step cost: prompt tokens prefilled, forward passes run, prefills run."""

    n_prefilled_tokens: int = 0
    n_forward_passes: int = 0
    n_prefills: int = 0


class BatchRunner:
    """The running batch on one model; called only from the engine's single worker thread."""

    def __init__(self, model: Any, tokenizer: Any, caches: SessionCacheStore, eos_ids: set[int]) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.caches = caches
        self.eos_ids = eos_ids
        self.uses_adapters = False
        self.rows: list[BatchRow] = []
        self._layers: Layers = []
        self._mask = torch.zeros(0, 0, dtype=torch.long)  # (B, L): 1 where row b has a token; its sum: next position
        self._next_ids = torch.zeros(0, 1, dtype=torch.long)  # (B, 1): the last sampled token

    def step(self, admit: list[BatchRow], drop: Collection[BatchRow] = ()) -> tuple[list[BatchRow], BatchStats]:
        """Drops ``drop`` from the batch, prefills ``admit`` into it, then decodes one token for every row.

        Returns the rows that finished in this step (their session caches stored) and its cost.
        On any error the running batch is emptied (its rows lost) and the error raised.
        """
        try:
            return self._step(admit, drop)
        except BaseException:
            self._keep([])
            raise

    @torch.inference_mode()
    def _step(self, admit: list[BatchRow], drop: Collection[BatchRow]) -> tuple[list[BatchRow], BatchStats]:
        stats = BatchStats()
        dropped = {id(row) for row in drop}
        if dropped:
            self._keep([i for i, row in enumerate(self.rows) if id(row) not in dropped])
        finished = self._admit(admit, stats) if admit else []
        if self.rows:
            finished += self._decode(stats)
        return finished, stats

    def _admit(self, rows: list[BatchRow], stats: BatchStats) -> list[BatchRow]:
        entries = [self.caches.get(row.routing_key) for row in rows]
        new_sessions = [entry is None for entry in entries]
        for i, (row, entry) in enumerate(zip(rows, entries)):
            if entry is not None:
                row.n_cached = entry.usable_prefix(row.prompt_ids, row.adapter)
            else:  # a new session: start from whatever cached sequence shares its prompt's start
                entries[i], row.n_cached = self.caches.longest_prefix(row.prompt_ids, row.adapter)
        unique, source = self._dedupe(rows)
        prefilled = [rows[i] for i in unique]
        n_cached = max(row.n_cached for row in prefilled)
        n_new = max(len(row.prompt_ids) - row.n_cached for row in prefilled)
        cache = self._merged_cache(prefilled, [entries[i] for i in unique], n_cached)
        device = self.model.device  # the model's (model.device); sampling stays on the CPU
        input_ids, positions, mask = (t.to(device) for t in self._prefill_inputs(prefilled, n_cached, n_new))
        out = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions,
            cache=cache, use_cache=True, logits_to_keep=1, **self._adapter_kwargs(prefilled),
        )
        stats.n_forward_passes += 1
        stats.n_prefills += 1
        stats.n_prefilled_tokens += sum(len(row.prompt_ids) - row.n_cached for row in prefilled)
        index = torch.tensor(source, dtype=torch.long)
        logits = out.logits[:, -1, :].float().cpu()[index]  # float32 logprobs whatever the model's dtype
        next_ids = [self._step_row(row, logits[i]) for i, row in enumerate(rows)]
        prefill_layers = [(layer.keys, layer.values) for layer in out.cache.layers]
        for j, i in enumerate(unique):  # a new session's prompt, for its group's later samples
            if new_sessions[i]:
                self._store(rows[i].prompt_ids, rows[i].adapter, prefill_layers, mask, j, prompt=True)
        index = index.to(device)
        layers = [(k[index], v[index]) for k, v in prefill_layers]
        self._join(rows, layers, mask[index], next_ids)
        return self._retire()

    @staticmethod
    def _dedupe(rows: list[BatchRow]) -> tuple[list[int], list[int]]:
        """Which rows to prefill, and for each row the index (among those) whose prefill it shares:
        rows with the same prompt, adapter and cached prefix length (a group's samples) prefill
        once; the prefix's keys and values depend only on its tokens and the adapter."""
        first: dict[Hashable, int] = {}
        unique: list[int] = []
        source: list[int] = []
        for i, row in enumerate(rows):
            key = (row.adapter, tuple(row.prompt_ids), row.n_cached)
            if key not in first:
                first[key] = len(unique)
                unique.append(i)
            source.append(first[key])
        return unique, source

    def _join(self, rows: list[BatchRow], layers: Layers, mask: torch.Tensor, next_ids: list[int]) -> None:
        ids = torch.tensor(next_ids, dtype=torch.long, device=mask.device).unsqueeze(1)
        if not self.rows:
            self.rows, self._layers, self._mask, self._next_ids = list(rows), layers, mask, ids
            return
        width = max(self._mask.shape[1], mask.shape[1])
        self._layers = [
            (torch.cat([_left_pad(k0, width), _left_pad(k1, width)]), torch.cat([_left_pad(v0, width), _left_pad(v1, width)]))
            for (k0, v0), (k1, v1) in zip(self._layers, layers)
        ]
        self._mask = torch.cat([F.pad(self._mask, (width - self._mask.shape[1], 0)), F.pad(mask, (width - mask.shape[1], 0))])
        self._next_ids = torch.cat([self._next_ids, ids])
        self.rows += rows

    def _decode(self, stats: BatchStats) -> list[BatchRow]:
        positions = self._mask.sum(dim=1, keepdim=True)  # (B, 1): each row's tokens so far
        ones = torch.ones(len(self.rows), 1, dtype=self._mask.dtype, device=self._mask.device)
        self._mask = torch.cat([self._mask, ones], dim=1)
        out = self.model(
            input_ids=self._next_ids, attention_mask=self._mask, position_ids=positions,
            cache=DynamicCache(ddp_cache_data=self._layers), use_cache=True, logits_to_keep=1,
            **self._adapter_kwargs(self.rows),
        )
        stats.n_forward_passes += 1
        self._layers = [(layer.keys, layer.values) for layer in out.cache.layers]
        logits = out.logits[:, -1, :].float().cpu()
        next_ids = [self._step_row(row, logits[i]) for i, row in enumerate(self.rows)]
        self._next_ids = torch.tensor(next_ids, dtype=torch.long, device=self._mask.device).unsqueeze(1)
        return self._retire()

    def _retire(self) -> list[BatchRow]:
        """Removes the finished rows, storing each one's cache: prompt and every generated token it fed."""
        done = [i for i, row in enumerate(self.rows) if row.finish_reason is not None]
        for i in done:
            row = self.rows[i]
            if row.routing_key is None:
                continue
            ids = row.prompt_ids + row.token_ids[:-1]  # the last sampled token was never fed
            self._store(ids, row.adapter, self._layers, self._mask, i, key=row.routing_key)
        finished = [self.rows[i] for i in done]
        if done:
            self._keep([i for i, row in enumerate(self.rows) if row.finish_reason is None])
        return finished

    def _store(
        self, ids: list[int], adapter: str | None, layers: Layers, mask: torch.Tensor, i: int,
        key: str | None = None, prompt: bool = False,
    ) -> None:
        """Stores row ``i``'s keys and values (the columns its mask marks: the tokens ``ids``)."""
        columns = mask[i].nonzero().squeeze(1)
        assert len(columns) == len(ids), f"row {i} holds {len(columns)} tokens, not {len(ids)}"
        kept = [(k[i : i + 1].index_select(2, columns), v[i : i + 1].index_select(2, columns)) for k, v in layers]
        entry = SessionCache(ids, adapter, kept)
        if prompt:
            self.caches.put_prompt(entry)
        else:
            self.caches.put(key, entry)

    def _keep(self, keep: list[int]) -> None:
        """Keeps only rows ``keep`` and cuts the leading columns none of them uses."""
        if not keep:
            self.rows, self._layers = [], []
            self._mask = self._mask[:0, :0]
            self._next_ids = self._next_ids[:0]
            return
        index = torch.tensor(keep, dtype=torch.long, device=self._mask.device)
        self.rows = [self.rows[i] for i in keep]
        mask = self._mask[index]
        start = int(mask.any(0).nonzero()[0])
        self._mask = mask[:, start:]
        self._layers = [(k[index, :, start:], v[index, :, start:]) for k, v in self._layers]
        self._next_ids = self._next_ids[index]

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


def _left_pad(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """Pads a (B, H, L, D) tensor with zeros on the left of its L axis to ``width`` columns."""
    return F.pad(tensor, (0, 0, width - tensor.shape[2], 0))
