"""A few learner steps of the embedded model's architecture (SmolLM2-135M) with LoRA on one device;
prints step time, tokens/s and MFU as JSON. Run by scripts/gpu_check.sh.

The weights are initialised at random from ``scripts/smollm2-135m-config.json`` unless the
de-quantised embedded model is on the machine (``--model DIR``): step time and FLOPs depend on
the architecture only, and a GPU machine without registry access cannot fetch the weights (the
GGUF package is larger than what travels with the check).

MFU = achieved FLOP/s / peak FLOP/s, with the FLOPs of a LoRA step counted as
``4 * N * D`` for the frozen base (forward 2ND, backward to the activations 2ND, no weight
gradients) plus ``6 * N_lora * D`` for the adapter (the 6ND rule of Kaplan et al. 2020,
"Scaling Laws for Neural Language Models", §2.1), N parameters, D tokens; attention's
sequence-length term is left out. Peak: NVIDIA's dense bf16 figure for the card (H100/H200 SXM
989 TFLOP/s, A100 312), or ``--peak-tflops``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0}


def _package() -> None:
    """Makes ``import gymfleet`` work from a bare checkout (no pip install on the GPU machine)."""
    try:
        import gymfleet  # noqa: F401
    except ImportError:
        import importlib.util

        for name, folder in (("gymfleet", ROOT / "gymfleet"), ("gymfleet.envs", ROOT / "envs"),
                             ("gymfleet.orchestrator", ROOT / "orchestrator"), ("gymfleet.trainer", ROOT / "trainer")):
            spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                          submodule_search_locations=[str(folder)])
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)


def _model_dir(args: argparse.Namespace, tmp: Path) -> str:
    if args.model:
        return args.model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(ROOT / "scripts" / "smollm2-135m-config.json")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp / "model")
    return str(tmp / "model")


def _groups(n_groups: int, group_size: int, seq_len: int, vocab: int) -> list:
    from gymfleet.core.records import Trajectory

    rng = np.random.default_rng(0)
    prompt = seq_len // 4
    groups = []
    for g in range(n_groups):
        group = []
        for i in range(group_size):
            ids = rng.integers(3, vocab, seq_len).astype(np.int32)
            mask = np.r_[np.zeros(prompt), np.ones(seq_len - prompt)].astype(np.uint8)
            group.append(Trajectory(f"r{g}-{i}", "gpu-check", f"g{g}", "check", "i", token_ids=ids, loss_mask=mask,
                                    logprobs=-np.ones(seq_len, np.float32) * mask,
                                    versions=np.where(mask, 0, -1).astype(np.int32), reward=float(i % 2)))
        groups.append(group)
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--model", default=None, help="a model folder (default: random weights, SmolLM2-135M's shape)")
    parser.add_argument("--steps", type=int, default=8, help="timed learner steps (after 2 warm-up steps)")
    parser.add_argument("--groups", type=int, default=4, help="groups per step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's peak (default: by card name)")
    args = parser.parse_args()
    _package()
    from gymfleet.core.models import ModelSpec, resolve_device
    from gymfleet.trainer import AdapterBucket, Learner, LearnerConfig, RolloutPolicy

    device = resolve_device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        spec = ModelSpec(name_or_path=_model_dir(args, Path(tmp)), dtype=args.dtype, device=device)
        config = LearnerConfig(dtype=args.dtype, device=device, lora_rank=args.lora_rank, lora_alpha=2.0 * args.lora_rank,
                               groups_per_step=args.groups, micro_batch_size=args.micro_batch, max_tokens=args.seq_len,
                               objective="none")  # random behaviour logprobs: no ratio mask, every token's gradient
        t_load = time.perf_counter()
        learner = Learner(config, RolloutPolicy(model=spec), source=None, bucket=AdapterBucket(str(Path(tmp) / "bucket"), "gpu-check"))
        load_s = time.perf_counter() - t_load
        vocab = int(learner.model.config.vocab_size)
        n_total = sum(p.numel() for p in learner.model.parameters())
        n_lora = sum(p.numel() for p in learner.model.parameters() if p.requires_grad)
        groups = _groups(args.groups, args.group_size, args.seq_len, vocab)
        tokens = args.groups * args.group_size * args.seq_len
        times = []
        for step in range(args.steps + 2):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            learner.train_on(groups)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            if step >= 2:
                times.append(time.perf_counter() - t0)
    step_s = float(np.median(times))
    flops = (4 * (n_total - n_lora) + 6 * n_lora) * tokens
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    print(json.dumps({
        "device": name, "torch": torch.__version__, "dtype": args.dtype, "model_load_s": round(load_s, 2),
        "params": n_total, "lora_params": n_lora, "tokens_per_step": tokens, "steps_timed": len(times),
        "step_s_median": round(step_s, 4), "step_s_all": [round(t, 4) for t in times],
        "tokens_per_s": round(tokens / step_s, 1), "achieved_tflops": round(flops / step_s / 1e12, 5),
        "peak_tflops": peak, "mfu": round(flops / step_s / 1e12 / peak, 4) if peak else None,
        "max_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.startswith("cuda") else None,
    }))


if __name__ == "__main__":
    main()
