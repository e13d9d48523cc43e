"""The data-parallel learner at world size 1 and 2 (or N): tokens/s, peak memory per rank, ratio.

Every world size runs the same GRPO steps (LoRA, or every weight with ``--adapter none``) of the real learner (``Learner.train_batch``:
rank 0's batch dealt over the ranks, DDP's all-reduce; :mod:`gymfleet.trainer.data_parallel`) on
the same synthetic groups, each rank a process of its own (spawned, gloo on the CPU, nccl on
GPUs), after one warm-up step. The model is the embedded SmolLM2-135M (``--model embedded``,
the default on the CPU) or, where it is not on the machine, random weights of its shape
(``--model random``: step time and FLOPs depend on the architecture only; what
``scripts/gpu_check.sh`` uses). Peak memory is each rank process's resident high-water mark
(``VmHWM``, the model included) on the CPU, ``torch.cuda.max_memory_allocated`` on a GPU. MFU
on GPUs as in ``scripts/gpu_check.py`` (FLOPs of a LoRA step 4*N*D + 6*N_lora*D, Kaplan et al.
2020, §2.1; the card's dense bf16 peak).

    python benchmarks/learner_scaling.py [--world-sizes 1,2] [--steps 2] [--seq-len 64]

Prints one JSON document; ``ratio`` is tokens/s at each world size over world size 1, measured
in the same invocation. Each world size's rank 0 then publishes its version once into a
temporary bucket (``publish_s``: weights, optimiser state, manifest with SHA-256).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import re
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_rss_bytes() -> int:
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


class _NothingToAck:
    """The benchmark's publish consumed no group: nothing to acknowledge."""

    async def ack_groups(self, group_ids: list[str], claimer: str) -> None:
        assert not group_ids


def _rank(args: argparse.Namespace, spec, model_dir: str, out: mp.Queue) -> None:
    """One rank: the learner, its group (world size > 1), a warm-up step, ``args.steps`` timed steps."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import torch

    from gpu_check import PEAK_BF16_TFLOPS, _groups, _package

    _package()
    from gymfleet.core.models import ModelSpec
    from gymfleet.trainer import AdapterBucket, Learner, LearnerConfig, RolloutPolicy
    from gymfleet.trainer.batch import collate
    from gymfleet.trainer.data_parallel import NoGroupSource, RankGroup

    torch.set_num_threads(args.threads_per_rank)
    device = args.device if not args.device.startswith("cuda") or spec is None else f"cuda:{spec.rank}"
    model = ModelSpec(dtype=args.dtype, device=device) if model_dir == "embedded" else \
        ModelSpec(name_or_path=model_dir, dtype=args.dtype, device=device)
    config = LearnerConfig(adapter=args.adapter, dtype=args.dtype, device=device, lora_rank=args.lora_rank, lora_alpha=2.0 * args.lora_rank,
                           micro_batch_size=args.micro_batch, max_tokens=args.seq_len, objective="none",
                           gradient_checkpointing=args.gradient_checkpointing)
    with tempfile.TemporaryDirectory() as tmp:
        learner = Learner(config, RolloutPolicy(model=model), NoGroupSource(), AdapterBucket(tmp, "bench"))
    ranks = RankGroup(spec) if spec is not None else None
    if ranks is not None:
        learner.join_ranks(ranks)
    vocab = int(learner.model.config.vocab_size)
    batch = collate(_groups(args.groups, args.group_size, args.seq_len, vocab), args.seq_len)
    times = []
    for step in range(args.steps + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        learner.train_batch(batch, args.groups)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if step:
            times.append(time.perf_counter() - t0)
    n_total = sum(p.numel() for p in learner.model.parameters())
    n_lora = sum(p.numel() for p in learner.weights.trainable())
    peak = torch.cuda.max_memory_allocated(torch.device(device)) if device.startswith("cuda") else _peak_rss_bytes()
    publish_s = None
    if spec is None or spec.rank == 0:  # one publish of the version (weights, optimiser state, manifest)
        with tempfile.TemporaryDirectory() as tmp:
            learner.bucket, learner.source = AdapterBucket(tmp, "bench"), _NothingToAck()
            t0 = time.perf_counter()
            asyncio.run(learner.publish())
            publish_s = time.perf_counter() - t0
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    out.put({"rank": 0 if spec is None else spec.rank, "step_s": times, "peak_bytes": peak, "params": n_total,
             "lora_params": n_lora, "device": name, "publish_s": publish_s,
             "peak_tflops": next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)})
    if ranks is not None:
        ranks.close()


def _world(args: argparse.Namespace, world: int, model_dir: str) -> dict:
    from gymfleet.trainer.data_parallel import RankSpec, free_port

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    backend = "nccl" if args.device.startswith("cuda") else "gloo"
    spec = RankSpec(0, world, "127.0.0.1", free_port(), backend, 600.0) if world > 1 else None
    procs = [ctx.Process(target=_rank, args=(args, spec and replace(spec, rank=r), model_dir, out))
             for r in range(world)]
    for p in procs:
        p.start()
    rows = sorted((out.get(timeout=args.timeout_s) for _ in procs), key=lambda r: r["rank"])
    for p in procs:
        p.join()
    step_s = max(sorted(r["step_s"])[len(r["step_s"]) // 2] for r in rows)  # the slowest rank's median
    tokens = args.groups * args.group_size * args.seq_len
    flops = (4 * (rows[0]["params"] - rows[0]["lora_params"]) + 6 * rows[0]["lora_params"]) * tokens
    peak = rows[0]["peak_tflops"]
    return {"world_size": world, "tokens_per_step": tokens, "step_s_median": round(step_s, 3),
            "tokens_per_s": round(tokens / step_s, 1), "peak_memory_mib_per_rank": [round(r["peak_bytes"] / 2**20) for r in rows],
            "achieved_tflops": round(flops / step_s / 1e12, 5),
            "mfu": round(flops / step_s / 1e12 / (peak * world), 4) if peak else None, "device": rows[0]["device"],
            "trained_params": rows[0]["lora_params"], "publish_s": round(rows[0]["publish_s"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-sizes", default="1,2", help="comma-separated world sizes (1 first: the baseline)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (rank r on cuda:r)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--model", default="embedded", help="embedded (the installed SmolLM2-135M), random, or a folder")
    parser.add_argument("--steps", type=int, default=2, help="timed steps (after one warm-up step)")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--adapter", default="lora", choices=["lora", "none"],
                        help="learner.adapter: lora, or none (full fine-tuning of every weight)")
    parser.add_argument("--threads-per-rank", type=int, default=1, help="torch threads of each rank")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--timeout-s", type=float, default=540.0, help="most seconds one world size may take")
    args = parser.parse_args()
    worlds = [int(w) for w in args.world_sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if args.model == "random":
            sys.path.insert(0, str(ROOT / "scripts"))
            from gpu_check import _model_dir, _package

            _package()
            model_dir = _model_dir(argparse.Namespace(model=None), Path(tmp))
        results = [_world(args, w, model_dir) for w in worlds]
    base = results[0]["tokens_per_s"]
    print(json.dumps({"results": results, "ratio": {str(r["world_size"]): round(r["tokens_per_s"] / base, 3)
                                                     for r in results},
                      "threads_per_rank": args.threads_per_rank, "model": args.model, "adapter": args.adapter}))


if __name__ == "__main__":
    main()
