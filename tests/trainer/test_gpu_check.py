"""scripts/gpu_check.sh, dry-run on the CPU at a tiny size: it trains LoRA steps of SmolLM2-135M's
shape through the real Learner and prints its figures as JSON (on a GPU machine: step time, MFU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_learner_steps_and_prints_step_time_and_flops() -> None:
    proc = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--device", "cpu", "--dtype", "float32", "--steps", "1", "--groups", "1",
         "--group-size", "2", "--seq-len", "64", "--micro-batch", "2"],
        cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["device"] == "cpu" and figures["steps_timed"] == 1 and figures["tokens_per_step"] == 128
    assert 1.3e8 < figures["params"] < 1.4e8 and 0 < figures["lora_params"] < 1e7  # SmolLM2-135M, rank 16
    assert figures["step_s_median"] > 0 and figures["achieved_tflops"] > 0 and figures["mfu"] is None  # no CPU peak


def test_the_data_parallel_recipe_refuses_a_machine_without_a_gpu_in_one_line() -> None:
    """`--data-parallel` runs benchmarks/learner_scaling.py on the GPUs torch sees (one rank per
    GPU, nccl); with none it says so and exits 2 instead of falling back to a CPU figure."""
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--data-parallel"], cwd=ROOT, text=True,
                          env={**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""},
                          capture_output=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert proc.stderr.strip() == "gpu_check: --data-parallel needs a CUDA GPU (torch sees none)"
