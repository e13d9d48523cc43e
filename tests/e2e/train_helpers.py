"""Writing a tiny training config and running the real `gymfleet train` entry point in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def tiny_train_config(tmp_path: Path, run_id: str, **train: Any) -> Path:
    """A training config on the echo test env (one short turn) with the real engine and learner."""
    doc = {
        "run_id": run_id,
        "store": str(tmp_path / "store.db"),
        "metrics_path": str(tmp_path / "metrics.jsonl"),
        "bucket": str(tmp_path / "bucket"),
        "report_dir": str(tmp_path / "report"),
        "max_in_flight": 4,
        "learner_threads": 1,
        "budget": {"max_steps": 2},
        # The untrained model almost never echoes the word: every group scores 0 and dynamic
        # sampling would skip them all, so these plumbing runs train on zero-variance groups.
        "learner": {"lora_rank": 1, "groups_per_step": 2, "micro_batch_size": 4, "max_tokens": 256,
                    "dynamic_sampling": {"enabled": False}},
        "tasks": [{
            "name": "echo", "env_id": "tests.orchestrator.fakes:gymfleet-test/SlowEcho-v0",
            "env_kwargs": {"n_instances": 8}, "group_size": 2, "max_turns": 1,
            "sampling": {"max_new_tokens": 6},
        }],
        **train,
    }
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def train_process(config: Path, *overrides: str, flags: tuple[str, ...] = (),
                  own_group: bool = False) -> subprocess.Popen[str]:
    """Starts ``gymfleet train CONFIG`` (the CLI's own entry point) in a subprocess; ``overrides``
    go as ``--set``, ``flags`` (``--require-learning``) as they are; ``own_group``: in a process
    group of its own, as a terminal's foreground job (Ctrl-C is ``os.killpg(pid, SIGINT)``)."""
    cmd = [sys.executable, "-m", "gymfleet.cli", "train", str(config), "--no-progress", *flags]
    for o in overrides:
        cmd += ["--set", o]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=own_group)


def run_train(config: Path, *overrides: str, timeout_s: float = 400,
              flags: tuple[str, ...] = ()) -> tuple[int, str]:
    """Runs ``gymfleet train`` to the end; returns its exit code and output."""
    proc = train_process(config, *overrides, flags=flags)
    out, _ = proc.communicate(timeout=timeout_s)
    return proc.returncode, out
