"""Async vs sync training: wall time for the same number of learner steps, and idle fractions.

Runs the real training job (:func:`gymfleet.run.job.train`: real TransformersEngine behind
the TITO gateway, real SQLite store, real bucket, real peft learner in its own process, all on
the embedded SmolLM2-135M) twice on the same config, once ``mode: async`` and once ``mode:
sync``, for the same number of learner steps. The environment is an in-process env whose reset
and step latencies are drawn from a log-normal distribution (median ``--median-s``, sigma
``--sigma``: a long tail, like sandboxes and graders), answered by the model in one short turn;
the reward is 1 when the reply contains the requested word.

Reports per mode: ``wall_s``, ``learner_idle_fraction`` (learner waiting for complete groups),
``generation_idle_fraction`` (no rollout in flight: waiting for the learner / the staleness
gate), and ``speedup`` = sync wall / async wall (the published systems report 2.5x to 3.9x at
cluster scale).

``--task terminal`` runs the same comparison on the real env-latency task instead: the terminal
easy tier (``gymfleet/TerminalEasy-v0``'s 48 training instances, two bash turns, real local
bubblewrap sandboxes and graders) whose every step waits a log-normal time (median
``--median-s``, sigma ``--sigma``), as ``benchmarks/vs_trl_terminal.py`` trains on
(:func:`vs_trl_terminal.register_slow_terminal`); 4 prompts x 4 samples a step, threads as the
job splits them, dynamic sampling off (the base model's groups are mostly zero-variance there).

Usage: ``python benchmarks/async_vs_sync.py [--task word|terminal] [--steps 4] [--median-s 1.0] [--sigma 1.0]``
Prints one JSON object on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import gymnasium
from rich.console import Console

from gymfleet.envs.base import AgentEnv
from gymfleet.run.config import train_config_from_dict
from gymfleet.run.job import train

ENV_ID = "gymfleet-bench/LongTailWord-v0"
WORDS = ("apple", "river", "green", "seven", "tiger", "cloud", "stone", "music")


class LongTailWordEnv(AgentEnv):
    """Say the requested word; reset and step each sleep a log-normal latency.

    Description: one-turn benchmark env. Observation: the request. Action: any text. Reward: 1
    when the reply contains the word. Episode end: after one action. Arguments: ``median_s``,
    ``sigma``, ``cap_s``. Version history: v0.
    """

    noop_action = ""

    def __init__(self, median_s: float = 1.0, sigma: float = 1.0, cap_s: float = 20.0) -> None:
        super().__init__()
        self.median_s, self.sigma, self.cap_s = median_s, sigma, cap_s
        self.word = WORDS[0]
        self.rng = random.Random()

    @property
    def system_prompt(self) -> str:
        return "Answer with the single word you are asked for."

    def instance_ids(self) -> list[str]:
        return [f"{w}-{i}" for i in range(64) for w in WORDS]

    async def _latency(self) -> None:
        await asyncio.sleep(min(self.rng.lognormvariate(0.0, self.sigma) * self.median_s, self.cap_s))

    async def reset_async(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        instance = (options or {}).get("instance_id") or self.instance_ids()[(seed or 0) % 512]
        self.word = instance.split("-")[0]
        self.rng.seed(f"{instance}/{seed}")
        await self._latency()
        return f"Say the word {self.word}.", {"instance_id": instance}

    async def step_async(self, action: str):
        await self._latency()
        return "done", float(self.word in action.lower()), True, False, {}

    async def close_async(self) -> None:
        return None

    def gold_policy(self, instance_id: str | None = None) -> Any:
        from gymfleet.envs.base import ScriptedPolicy

        return ScriptedPolicy([instance_id or self.word])


def _terminal_config(mode: str, root: Path, args: argparse.Namespace) -> Any:
    """The terminal easy tier with slow steps (see the module docstring): ``vs_trl_terminal``'s
    training task, 2 turns of at most 32 tokens at temperature 1."""
    from vs_trl_terminal import _instances, _task

    from gymfleet.envs.terminal.easy import TRAIN_WORDS

    task = _task(argparse.Namespace(group_size=args.group_size, max_turns=2, temperature=1.0, max_new_tokens=32,
                                    step_latency_s=args.median_s, latency_sigma=args.sigma), _instances(TRAIN_WORDS))

    return train_config_from_dict({
        "run_id": f"bench-{mode}", "store": str(root / mode / "store.db"),
        "metrics_path": str(root / mode / "metrics.jsonl"), "bucket": str(root / mode / "bucket"),
        "report_dir": str(root / mode / "report"), "mode": mode, "max_in_flight": args.in_flight,
        "budget": {"max_steps": args.steps}, "max_staleness": 1,
        "learner": {"lora_rank": 8, "groups_per_step": args.groups_per_step,
                    "max_tokens": 1024,
                    "dynamic_sampling": {"enabled": False}},
        "tasks": [task],
    })


def _config(mode: str, root: Path, args: argparse.Namespace) -> Any:
    if args.task == "terminal":
        return _terminal_config(mode, root, args)
    return train_config_from_dict({
        "run_id": f"bench-{mode}", "store": str(root / mode / "store.db"),
        "metrics_path": str(root / mode / "metrics.jsonl"), "bucket": str(root / mode / "bucket"),
        "report_dir": str(root / mode / "report"), "mode": mode, "max_in_flight": args.in_flight,
        "learner_threads": 1, "budget": {"max_steps": args.steps},
        "learner": {"lora_rank": 4, "groups_per_step": args.groups_per_step, "micro_batch_size": 8,
                    "max_tokens": 256}, "max_staleness": 2, "sampling": {"temperature": 1.0},
        "tasks": [{"name": "word", "env_id": ENV_ID, "group_size": args.group_size, "max_turns": 1,
                   "env_kwargs": {"median_s": args.median_s, "sigma": args.sigma},
                   "sampling": {"max_new_tokens": 8}}],
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("word", "terminal"), default="word",
                        help="word: the one-turn in-process env; terminal: the easy tier on real sandboxes, slow steps")
    parser.add_argument("--steps", type=int, default=None, help="learner steps (default: word 4, terminal 12)")
    parser.add_argument("--groups-per-step", type=int, default=None, help="default: word 2, terminal 4")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=None, help="default: word 8, terminal 32")
    parser.add_argument("--median-s", type=float, default=None, help="median env latency, s (default: word 1, terminal 10)")
    parser.add_argument("--sigma", type=float, default=None, help="log-normal sigma (default: word 1.0, terminal 0.5)")
    args = parser.parse_args()
    word = args.task == "word"
    for name, (for_word, for_terminal) in {"steps": (4, 12), "groups_per_step": (2, 4), "in_flight": (8, 32),
                                           "median_s": (1.0, 10.0), "sigma": (1.0, 0.5)}.items():
        if getattr(args, name) is None:
            setattr(args, name, for_word if word else for_terminal)
    if word and ENV_ID not in gymnasium.registry:
        gymnasium.register(ENV_ID, entry_point=LongTailWordEnv, disable_env_checker=True)
    if not word:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from vs_trl_terminal import register_slow_terminal

        register_slow_terminal()
    console = Console(stderr=True)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gymfleet-async-vs-sync-") as tmp:
        for mode in ("sync", "async"):
            console.print(f"[bold]{mode}[/bold]: {args.steps} learner steps")
            outcome = asyncio.run(train(_config(mode, Path(tmp), args), console=console, live=False))
            r = outcome.report.to_dict()
            results[mode] = {k: r[k] for k in ("wall_s", "n_steps", "learner_idle_s", "learner_idle_fraction",
                                               "generation_idle_s", "generation_idle_fraction",
                                               "staleness_histogram", "final_version")}
    print(json.dumps({
        "setup": {"engine": "TransformersEngine (embedded SmolLM2-135M, CPU)",
                  "learner": f"peft LoRA r={4 if word else 8}, own process",
                  "env_latency": (f"reset and step each lognormal(median {args.median_s} s, sigma {args.sigma}), capped 20 s"
                                  if word else f"each step lognormal(median {args.median_s} s, sigma {args.sigma}), capped 60 s"),
                  **vars(args)},
        **results,
        "speedup_sync_over_async": results["sync"]["wall_s"] / results["async"]["wall_s"],
    }, indent=2))


if __name__ == "__main__":
    sys.exit(main())
