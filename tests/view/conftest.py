"""Helpers of the viewer's tests: a free port, a learner log as the learner writes it."""

from __future__ import annotations

import json
import socket
from pathlib import Path


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_learner_log(report_dir: Path, n_steps: int) -> None:
    """A ``learner.jsonl`` as the learner writes it (a start row, then one row per step)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"event": "start", "t": 0.0, "step": 0, "version": 0, "resumed": False}]
    rows += [{"event": "step", "t": float(i), "step": i, "loss": 0.1 / i, "mean_reward": 0.1 * i, "version": i,
              "n_groups": 2, "n_tokens": 900, "masked_fraction": 0.02, "kl": 0.001, "mean_ratio": 1.0,
              "duration_s": 1.5, "idle_s": 0.2, "published_version": i, "filter": {"staleness": [0, 1, 0, 1]}}
             for i in range(1, n_steps + 1)]
    (report_dir / "learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
