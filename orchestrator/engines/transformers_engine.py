"""TransformersEngine: the embedded in-process engine (continuous batching, session KV caches, LoRA adapters)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gymfleet.core.full_weights import load_full_weights
from gymfleet.core.models import load_causal_lm, load_tokenizer
from gymfleet.core.records import Generation, SamplingParams
from gymfleet.orchestrator.engines.adapters import adapter_version, is_full_weights
from gymfleet.orchestrator.engines.batch import BatchRow, BatchRunner, BatchStats
from gymfleet.orchestrator.engines.config import TransformersEngineConfig
from gymfleet.orchestrator.engines.errors import (
    AdapterError,
    ContextLengthError,
    ReplicaServerError,
    UnknownAdapterError,
)
from gymfleet.orchestrator.engines.kv_cache import SessionCacheStore


@dataclass
class _Pending:
    row: BatchRow
    future: asyncio.Future[None]


@dataclass
class EngineStats:
    """Counters since start-up, for benchmarks and logs."""

    n_prefilled_tokens: int = 0
    n_generated_tokens: int = 0
    n_forward_passes: int = 0
    n_batches: int = 0
    """Prefills run: requests joining the running batch together."""


class TransformersEngine:
    """An :class:`~gymfleet.orchestrator.protocols.Engine` running a transformers model in-process.

    Concurrent ``generate`` calls share forward passes (continuous batching,
    :mod:`~gymfleet.orchestrator.engines.batch`): a request that arrives while others decode
    joins them at the next step, up to ``max_batch_size`` rows, and leaves as soon as it
    finishes; an idle engine waits ``batch_window_ms`` for others to join the first request.
    Requests with the same prompt and adapter (a group's samples) share its prefill. Each
    routing key's KV cache is kept, so the next turn of a rollout prefills only the tokens
    beyond the cached prefix, and a rollout's first turn starts from any cached sequence that
    shares its prompt's start. Adapters are peft LoRA adapters, several loaded at once,
    mixed in one batch (peft ``adapter_names``). A version of full weights (``learner.adapter:
    none``) is loaded in place of the model's weights instead (one set at a time: each newer one
    replaces the last; see :meth:`load_adapter`). The model runs in one worker thread, so the
    event loop never blocks. Logprobs follow :mod:`gymfleet.core.sampling`
    (after temperature and top-p; greedy reports temperature-1 logprobs).

    Use as an async context manager (or call :meth:`aclose`).
    """

    def __init__(self, config: TransformersEngineConfig, model: Any = None, tokenizer: Any = None) -> None:
        self.config = config
        self.name = config.name
        if config.n_threads:
            torch.set_num_threads(config.n_threads)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config.source)
        self.model = model if model is not None else load_causal_lm(config.source)
        self.max_context_tokens = config.max_context_tokens or int(self.model.config.max_position_embeddings)
        eos = {self.tokenizer.eos_token_id} | set(_as_list(self.model.generation_config.eos_token_id))
        self.caches = SessionCacheStore(config.max_cached_sessions, config.max_cached_tokens)
        self.runner = BatchRunner(self.model, self.tokenizer, self.caches, {e for e in eos if e is not None})
        self.adapters: dict[str, str] = {}
        self.full_versions: set[str] = set()
        """Names of the full-weight versions loaded (the model holds the newest's weights)."""
        self.stats = EngineStats()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"engine-{self.name}")
        self._queue: asyncio.Queue[_Pending] | None = None
        self._batcher: asyncio.Task[None] | None = None
        self._seedless = torch.Generator().manual_seed(0)

    async def __aenter__(self) -> TransformersEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stops the batcher and the worker thread; pending requests are cancelled."""
        if self._batcher is not None:
            self._batcher.cancel()
            await asyncio.gather(self._batcher, return_exceptions=True)
            self._batcher = None
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        adapter: str | None = None,
        routing_key: str | None = None,
    ) -> Generation:
        """Samples one continuation of ``prompt_ids``.

        Raises:
            ContextLengthError: the prompt leaves no room for one new token.
            UnknownAdapterError: ``adapter`` is not loaded.
        """
        if not prompt_ids:
            raise ContextLengthError("empty prompt: pass at least one token id")
        room = self.max_context_tokens - len(prompt_ids)
        if room < 1:
            raise ContextLengthError(
                f"prompt of {len(prompt_ids)} tokens does not fit the context window of "
                f"{self.max_context_tokens} tokens: shorten the conversation or end the rollout"
            )
        if adapter is not None and adapter not in self.adapters and adapter not in self.full_versions:
            raise UnknownAdapterError(
                f"adapter {adapter!r} is not loaded on replica {self.name!r} "
                f"(loaded: {sorted(self.adapters)}): load it first"
            )
        generator = torch.Generator().manual_seed(sampling.seed) if sampling.seed is not None else self._seedless
        lora = None if adapter in self.full_versions else adapter  # full weights are the model's own
        row = BatchRow(list(prompt_ids), sampling, lora, routing_key, min(sampling.max_new_tokens, room), generator)
        pending = _Pending(row, asyncio.get_running_loop().create_future())
        self._ensure_batcher().put_nowait(pending)
        await pending.future
        return Generation(
            token_ids=row.token_ids, logprobs=row.logprobs, finish_reason=row.finish_reason or "length",
            adapter_version=adapter_version(adapter), replica=self.name,
            n_prompt_tokens=len(row.prompt_ids), n_cached_tokens=row.n_cached,
        )

    async def load_adapter(self, name: str, path: str) -> None:
        """Loads a peft LoRA adapter under ``name``, or a version of full weights in place of the
        model's (:func:`~gymfleet.orchestrator.engines.adapters.is_full_weights`).

        Full weights are copied into the model between two decode steps, and every cached KV is
        dropped; requests already decoding go on with the new weights (their tokens' logprobs
        are the new weights', so the learner's importance ratios stay exact), and a request
        naming an older full-weight version is served by the newest (stamped with the older
        version: staleness is over-counted, never under). Loading one uses no memory beyond the
        file read (about the model's size, freed after).

        Raises:
            AdapterError: already loaded, too many adapters, the files do not load, or full
                weights and LoRA adapters would be mixed on one replica.
        """
        if is_full_weights(path):
            await self._load_full(name, path)
            return
        if self.full_versions:
            raise AdapterError(f"replica {self.name!r} serves full weights {sorted(self.full_versions)}: "
                               f"a LoRA adapter ({name!r}) does not go on them; use one kind per run")
        if name in self.adapters:
            raise AdapterError(f"adapter {name!r} is already loaded on {self.name!r}: unload it first")
        if len(self.adapters) >= self.config.max_adapters:
            raise AdapterError(
                f"replica {self.name!r} already holds {len(self.adapters)} adapters (max_adapters="
                f"{self.config.max_adapters}): unload an old version first"
            )
        try:
            await self._in_worker(self._load_adapter_sync, name, path)
        except Exception as exc:
            raise AdapterError(f"loading adapter {name!r} from {path!r} on {self.name!r} failed: {exc}") from exc
        self.adapters[name] = path

    async def _load_full(self, name: str, path: str) -> None:
        if self.runner.uses_adapters:
            raise AdapterError(f"replica {self.name!r} holds LoRA adapters {sorted(self.adapters)}: full weights "
                               f"({name!r}) would not reach them; use one kind per run")
        try:
            await self._in_worker(self._load_full_sync, path)
        except Exception as exc:
            raise AdapterError(f"loading full weights {name!r} from {path!r} on {self.name!r} failed: {exc}") from exc
        self.full_versions.add(name)

    def _load_full_sync(self, path: str) -> None:
        load_full_weights(self.model, Path(path.removeprefix("file://")))
        self.caches.clear()  # computed with the weights just replaced

    async def unload_adapter(self, name: str) -> None:
        """Unloads an adapter and forgets the caches it computed (a full-weight version's name is
        forgotten; the model keeps the newest weights loaded).

        Raises:
            UnknownAdapterError: ``name`` is not loaded.
        """
        if name in self.full_versions:
            self.full_versions.discard(name)
            return
        if name not in self.adapters:
            raise UnknownAdapterError(f"adapter {name!r} is not loaded on {self.name!r}")
        await self._in_worker(self._unload_adapter_sync, name)
        del self.adapters[name]

    async def health(self) -> bool:
        """True while the batcher is alive (or not yet started)."""
        return self._batcher is None or not self._batcher.done()

    def _load_adapter_sync(self, name: str, path: str) -> None:
        from peft import PeftModel

        if isinstance(self.model, PeftModel):
            self.model.load_adapter(path, adapter_name=name)
        else:
            self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name)
            self.model.eval()
            self.runner.model = self.model
        self.runner.uses_adapters = True

    def _unload_adapter_sync(self, name: str) -> None:
        if set(self.model.peft_config) == {name}:
            # peft cannot run with zero adapters: strip the LoRA layers, back to the base model
            self.model = self.model.unload()
            self.runner.model = self.model
            self.runner.uses_adapters = False
        else:
            self.model.delete_adapter(name)
        self.caches.drop_adapter(name)

    async def _in_worker(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _ensure_batcher(self) -> asyncio.Queue[_Pending]:
        if self._queue is None or self._batcher is None:
            self._queue = asyncio.Queue()
            self._batcher = asyncio.get_running_loop().create_task(self._batch_loop(self._queue))
        return self._queue

    async def _batch_loop(self, queue: asyncio.Queue[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        running: dict[int, _Pending] = {}  # id(row) -> its request, for the rows in the running batch
        while True:
            admit: list[_Pending] = []
            if not running:  # idle: the first request waits batch_window_ms for others to join it
                admit.append(await queue.get())
                deadline = loop.time() + self.config.batch_window_ms / 1000
                while len(admit) < self.config.max_batch_size:
                    try:
                        admit.append(await asyncio.wait_for(queue.get(), max(0.0, deadline - loop.time())))
                    except TimeoutError:
                        break
            while len(running) + len(admit) < self.config.max_batch_size and not queue.empty():
                admit.append(queue.get_nowait())  # busy: whoever waits joins at the next decode step
            admit = [p for p in admit if not p.future.done()]
            cancelled = [p.row for p in running.values() if p.future.done()]
            for row in cancelled:
                del running[id(row)]
            running.update((id(p.row), p) for p in admit)
            if running:
                await self._step(running, [p.row for p in admit], cancelled)

    def _step_loaded(
        self, admit: list[BatchRow], cancelled: list[BatchRow]
    ) -> tuple[list[BatchRow], list[BatchRow], BatchStats]:
        """One step of the running batch, leaving out the rows whose adapter is no longer loaded
        (checked in the worker, after any unload queued ahead of it); returns the rows finished,
        the rows left out, and the step's cost."""
        loaded = set(self.model.peft_config) if self.runner.uses_adapters else set()
        gone = [row for row in [*admit, *self.runner.rows] if row.adapter is not None and row.adapter not in loaded]
        gone_ids = {id(row) for row in gone}
        finished, stats = self.runner.step([row for row in admit if id(row) not in gone_ids], [*cancelled, *gone])
        return finished, gone, stats

    async def _step(self, running: dict[int, _Pending], admit: list[BatchRow], cancelled: list[BatchRow]) -> None:
        try:
            finished, gone, stats = await self._in_worker(self._step_loaded, admit, cancelled)
        except Exception as exc:  # a failed step fails the requests in the batch, never the batcher
            error = ReplicaServerError(f"replica {self.name!r}: batch of {len(running)} failed: {exc!r}")
            for p in running.values():
                if not p.future.done():
                    p.future.set_exception(error)
            running.clear()
            return
        for row in gone:  # unloaded while the request waited or ran: a bad request, not a failed replica
            p = running.pop(id(row))
            if not p.future.done():
                p.future.set_exception(UnknownAdapterError(
                    f"adapter {row.adapter!r} was unloaded from replica {self.name!r} before its "
                    "request finished: keep a version loaded while turns sampled with it are in flight"
                ))
        self.stats.n_batches += stats.n_prefills
        self.stats.n_forward_passes += stats.n_forward_passes
        self.stats.n_prefilled_tokens += stats.n_prefilled_tokens
        self.stats.n_generated_tokens += sum(len(row.token_ids) for row in finished)
        for row in finished:
            p = running.pop(id(row))
            if not p.future.done():
                p.future.set_result(None)


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [int(value)]

