"""Per-session KV caches of one replica, keyed by routing key, with an LRU bound; prompts' caches too.

A request whose own session has no cache (a rollout's first turn) may start from any cached
sequence it shares a prefix with: the prompt another sample of its group prefilled a moment ago
(stored by :meth:`SessionCacheStore.put_prompt`), or the system prompt every rollout of a task
shares (automatic prefix caching, as in vLLM, over whole cached sequences rather than blocks).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch


@dataclass
class SessionCache:
    """The keys and values of one session's conversation so far.

    Attributes:
        token_ids: the L token ids whose keys/values are held.
        adapter: adapter that computed them (None = base model); another adapter misses.
        layers: per layer ``(keys, values)``, each of shape ``(1, H_kv, L, D)``.
    """

    token_ids: list[int]
    adapter: str | None
    layers: list[tuple[torch.Tensor, torch.Tensor]]

    def usable_prefix(self, prompt_ids: list[int], adapter: str | None) -> int:
        """How many leading prompt tokens this cache can serve (0 on adapter mismatch).

        At least one prompt token is always left to prefill, since its logits start decoding.
        """
        if adapter != self.adapter:
            return 0
        limit = min(len(self.token_ids), len(prompt_ids) - 1)
        n = 0
        while n < limit and self.token_ids[n] == prompt_ids[n]:
            n += 1
        return n


PROMPT_KEY = "\0prompt\0"
"""Prefix of the keys under which prompts' caches are stored (no routing key starts with NUL)."""


class SessionCacheStore:
    """LRU map routing key -> :class:`SessionCache`; the least recently used session is evicted first.

    Bounded both in sessions and in cached tokens (for SmolLM2-135M in float32 one token's keys
    and values take 30 layers x 2 x 3 heads x 64 x 4 B = 46 KB).
    """

    def __init__(self, max_sessions: int, max_tokens: int | None = None) -> None:
        self.max_sessions = max_sessions
        self.max_tokens = max_tokens
        self.n_tokens = 0
        self._entries: OrderedDict[str, SessionCache] = OrderedDict()

    def get(self, key: str | None) -> SessionCache | None:
        """The session's cache, marked most recently used; None when absent."""
        if key is None or key not in self._entries:
            return None
        self._entries.move_to_end(key)
        return self._entries[key]

    def longest_prefix(self, prompt_ids: list[int], adapter: str | None) -> tuple[SessionCache | None, int]:
        """The cached sequence (any session's or prompt's) serving the most leading tokens of
        ``prompt_ids`` under ``adapter``, and how many; ``(None, 0)`` when none shares a token.
        Marks the one found most recently used. Cost: one scan of the entries."""
        best: tuple[str | None, int] = (None, 0)
        for key, entry in self._entries.items():
            if entry.adapter == adapter and entry.token_ids[:1] == prompt_ids[:1]:
                n = entry.usable_prefix(prompt_ids, adapter)
                if n > best[1]:
                    best = (key, n)
        if best[0] is None:
            return None, 0
        self._entries.move_to_end(best[0])
        return self._entries[best[0]], best[1]

    def put_prompt(self, entry: SessionCache) -> None:
        """Stores a prompt's cache, for requests with the same prompt or a prefix of it to start from."""
        self.put(f"{PROMPT_KEY}{entry.adapter}\0{hash(tuple(entry.token_ids))}", entry)

    def put(self, key: str | None, entry: SessionCache) -> None:
        """Stores a session's cache, evicting the least recently used beyond ``max_sessions``."""
        if key is None or self.max_sessions <= 0:
            return
        self._pop(key)
        self._entries[key] = entry
        self.n_tokens += len(entry.token_ids)
        while len(self._entries) > self.max_sessions or (
            self.max_tokens is not None and self.n_tokens > self.max_tokens and len(self._entries) > 1
        ):
            self._pop(next(iter(self._entries)))

    def drop_adapter(self, adapter: str) -> None:
        """Forgets every cache computed with ``adapter`` (called when it is unloaded)."""
        for key in [k for k, e in self._entries.items() if e.adapter == adapter]:
            self._pop(key)

    def clear(self) -> None:
        """Forgets every cache (called when full weights replace the model's: none still holds)."""
        self._entries.clear()
        self.n_tokens = 0

    def _pop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.n_tokens -= len(entry.token_ids)

    def __len__(self) -> int:
        return len(self._entries)
