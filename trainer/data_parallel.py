"""RankGroup: the data-parallel learner's ranks over torch.distributed (DDP), and how a step's
batch is dealt over them.

Engine: PyTorch's own ``torch.distributed`` with ``DistributedDataParallel`` (gloo on the CPU,
nccl on GPUs). DDP is what accelerate, TRL and Ray Train wrap for data parallelism; using it
directly adds no dependency, works the same in a spawned process, a thread's process or a Ray
actor, and leaves the learner's loop (claims, publish, ack) where it is: only rank 0 talks to the
store and the bucket.

One step on ``world_size`` ranks: rank 0 claims and repairs the groups and collates them into one
:class:`~gymfleet.trainer.batch.TrainBatch`; it broadcasts the batch; every rank takes its share
(:func:`shard_batch`), runs its micro-batches with the loss normalised by the whole step's
generated tokens, and DDP all-reduces the gradients in the last backward. Each rank's loss is
scaled by ``world_size`` because DDP averages: the sum over ranks is then the one-rank
gradient exactly (the loss is a sum over tokens, :mod:`gymfleet.trainer.loss`), so every rank
clips and steps the same weights and rank 0 publishes them. A rank that dies makes the next
collective raise (gloo notices the closed socket; a silent one after ``dist_timeout_s``):
:class:`~gymfleet.trainer.errors.RankLostError`, and the step fails before anything is published.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import torch

from gymfleet.core.records import ClaimedGroup
from gymfleet.trainer.batch import TrainBatch
from gymfleet.core.errors import TrainError
from gymfleet.trainer.errors import RankLostError


@dataclass(frozen=True)
class RankSpec:
    """Where one rank joins its group (picklable: it crosses the spawn to a follower rank)."""

    rank: int
    world_size: int
    master_addr: str
    """Host of rank 0's rendezvous (``127.0.0.1`` for ranks on one machine)."""
    master_port: int
    backend: str = "gloo"
    timeout_s: float = 300.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the rendezvous of a new group)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def resolve_backend(name: str, device: torch.device) -> str:
    """``auto`` -> nccl on a CUDA device, gloo otherwise."""
    if name != "auto":
        return name
    return "nccl" if device.type == "cuda" else "gloo"


def shard_batch(batch: TrainBatch, rank: int, world_size: int) -> TrainBatch:
    """Rank ``rank``'s share of a step's batch: its sequences dealt longest first, round-robin
    (rank r gets the r-th, (r+W)-th... longest), so that every rank gets about as many tokens.

    A rank left without a sequence (fewer sequences than ranks) gets the longest one with its
    loss mask zeroed: its backward still reaches every parameter (DDP's all-reduce needs every
    rank) and adds a zero gradient.

    Args:
        batch: the whole step, (B, T) tensors.
        rank: 0 <= rank < world_size.
        world_size: ranks.

    Returns:
        A batch of about B / world_size sequences (at least one), each as in ``batch``.
    """
    lengths = batch.attention_mask.sum(dim=1)
    order = torch.argsort(lengths, descending=True, stable=True)
    rows = order[rank::world_size]
    if len(rows) == 0:
        rows = order[:1]
        return dataclasses.replace(_rows(batch, rows), loss_mask=torch.zeros_like(batch.loss_mask[rows]))
    return _rows(batch, rows)


def _rows(batch: TrainBatch, rows: torch.Tensor) -> TrainBatch:
    return TrainBatch(batch.input_ids[rows], batch.attention_mask[rows], batch.loss_mask[rows],
                      batch.behaviour_logp[rows], batch.advantages[rows], batch.rewards[rows])


class FollowerRank(Protocol):
    """A started follower rank (a ``multiprocessing.Process``, or a Ray actor's handle)."""

    def is_alive(self) -> bool:
        """Whether the rank still runs (checked before rank 0 tells the ranks to exit)."""
        ...

    def join(self, timeout: float | None = None) -> None:
        """Waits up to ``timeout`` seconds for the rank to exit (after rank 0 sent None)."""
        ...

    def kill(self) -> None:
        """Ends the rank at once (it did not exit in time)."""
        ...


class RankLauncher(Protocol):
    """Starts ranks 1..world_size-1 of the learner's data-parallel group:
    :class:`~gymfleet.trainer.worker.SpawnedRanks` (processes on this machine, the default) or
    ``gymfleet train --cluster``'s Ray actors (:class:`gymfleet.run.ray_learner.RayRanks`)."""

    def master_addr(self) -> str:
        """The address the other ranks reach rank 0's rendezvous at (called on rank 0)."""
        ...

    def start(self, args: Any, spec: RankSpec) -> list[FollowerRank]:
        """Starts every follower rank of ``spec`` (ranks 1..``spec.world_size``-1, each running
        :func:`~gymfleet.trainer.worker.follower_process` with ``args``, the learner's
        ``WorkerArgs`` (typed Any: this module does not import the worker), and ``spec`` at its
        rank); called on rank 0 once it resumed, before it joins the group."""
        ...


class RankGroup:
    """This process's membership of the learner's process group.

    Joining blocks until every rank has joined (or ``spec.timeout_s`` passes). Every method but
    :attr:`rank` is a collective: all ranks call it in the same order.

    Args:
        spec: this rank and the rendezvous.

    Raises:
        RankLostError: the group cannot be formed in time (a rank did not start).
    """

    def __init__(self, spec: RankSpec) -> None:
        import torch.distributed as dist

        self.spec = spec
        self._dist = dist
        if spec.backend == "nccl":
            # nccl's object collectives and barriers run on the current device: one GPU per rank
            # (rank r's on one machine, the only one a Ray actor sees), as the learner's device
            torch.cuda.set_device(spec.rank % max(1, torch.cuda.device_count()))
        try:
            dist.init_process_group(spec.backend, init_method=f"tcp://{spec.master_addr}:{spec.master_port}",
                                    rank=spec.rank, world_size=spec.world_size,
                                    timeout=timedelta(seconds=spec.timeout_s))
        except (RuntimeError, ValueError) as exc:
            raise RankLostError(f"the learner's {spec.world_size} ranks did not meet at {spec.master_addr}:"
                                f"{spec.master_port} within {spec.timeout_s:.0f} s: {exc}") from exc

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def world_size(self) -> int:
        return self.spec.world_size

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (the others pass anything, e.g. None).

        Raises:
            RankLostError: a rank is gone or silent past the timeout.
        """
        box = [obj]
        self._collective(self._dist.broadcast_object_list, box, src=0)
        return box[0]

    def all_sum(self, values: list[float]) -> list[float]:
        """Each value summed over the ranks (float64).

        Raises:
            RankLostError: a rank is gone or silent past the timeout.
        """
        t = torch.tensor(values, dtype=torch.float64)
        self._collective(self._dist.all_reduce, t)
        return t.tolist()

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` under DDP: it broadcasts rank 0's parameters now (a resumed adapter reaches
        every rank) and all-reduces (averages) gradients in each backward outside ``no_sync``.

        Raises:
            RankLostError: a rank is gone or silent past the timeout.
        """
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        ids = [device.index] if device.type == "cuda" else None
        return self._collective(DistributedDataParallel, model, device_ids=ids)

    def _collective(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with self.guard():
            return fn(*args, **kwargs)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Turns what a lost rank makes torch.distributed raise inside the block (a collective,
        or DDP's all-reduce in a backward) into :class:`RankLostError`."""
        try:
            yield
        except (RuntimeError, ConnectionError) as exc:  # gloo: "Connection closed by peer", timeouts
            raise RankLostError(f"a learner rank was lost ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                                "the step is failed and nothing it trained is published: rerun to resume "
                                "from the last published version") from exc

    def close(self) -> None:
        """Leaves the group (idempotent; safe after a rank was lost)."""
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


class NoGroupSource:
    """The :class:`~gymfleet.trainer.signal.GroupSource` of a follower rank: rank 0 claims for
    every rank, so a follower asking is a bug."""

    async def claim_groups(self, n: int, claimer: str, lease_s: float) -> list[ClaimedGroup]:
        raise TrainError("a follower rank never claims groups: rank 0 claims and deals each step's batch")

    async def ack_groups(self, group_ids: list[str], claimer: str) -> None:
        raise TrainError("a follower rank never acknowledges groups: rank 0 publishes and acks")
