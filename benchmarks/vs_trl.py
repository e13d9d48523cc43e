"""gymfleet vs TRL's GRPOTrainer: wall time and held-out reward curve on the same task.

Both systems train a LoRA adapter on the embedded SmolLM2-135M-Instruct
(:func:`gymfleet.core.models.resolve_model_dir`) with the same LoRA configuration (rank, alpha,
target modules, no dropout), the same learning rate (AdamW, constant, no warm-up, grad-norm clip
1.0, no KL: ``beta=0``), the same sampling (temperature, ``max_new_tokens``), the same group
size and the same number of generated samples (steps x prompts per step x group size), on the
SayWord task of ``tests/run/test_learning.py`` ("Say the word W.", reward 1 when the reply
contains W). The reward is literally the same code: TRL's reward function resets a
``SayWordEnv`` on the prompt's word and returns what its ``step_async`` returns.

* gymfleet: :func:`gymfleet.run.job.train` (async mode, embedded TransformersEngine, SQLite
  store, bucket, learner process), dynamic sampling off (TRL has none), publishing every step.
* TRL: ``GRPOTrainer`` on the CPU (transformers ``generate``), ``num_generations`` = group size,
  ``per_device_train_batch_size`` = prompts per step x group size (one generation per step,
  ``num_iterations=1``), ``peft_config`` = the same ``LoraConfig``; its default loss (``dapo``)
  and group reward scaling are kept. A callback saves the adapter every ``--eval-every`` steps.

Held-out reward: the mean reward on held-out words (never trained on) of the adapter at steps 0,
k, 2k, ... and the last, measured after both runs (so evaluation never counts in a wall time)
with the same code for both: :func:`gymfleet.run.evaluate.evaluate` (``--eval-samples``
fixed-seed samples per word at the task's temperature, the same seeds for every adapter). Each
point's wall time is when that adapter existed (bucket ``published_at`` / the TRL callback),
counted from the start of that system's run (model loading included).

Reports each system's wall time, samples generated, training reward by step and held-out curve,
and the headline ``time_to_reward``: for each target held-out reward (TRL's best point, and the
fixed ``--target``), each system's wall time to FIRST reach it (the wall time of its first
evaluated adapter scoring at least the target; null when none does), and
``trl_s_over_gymfleet_s`` (> 1: gymfleet got there first). One system's time is never set
against the other's whole run: a system that stops improving early would look slow. Writes a
PNG of both curves against wall time (``--png``).

Needs TRL (``make setup`` installs it, the ``bench`` extra): ``pip install -c requirements-pins.txt -e '.[bench]'``.
Usage: ``python benchmarks/vs_trl.py [--steps 8] [--prompts-per-step 4] [--group-size 4]``
Prints one JSON object on stdout; progress goes to stderr. Not part of ``make bench`` (minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

INSTALL_HINT = ("vs_trl.py needs TRL: pip install -c requirements-pins.txt -e '.[bench]' "
                "(or: pip install -c requirements-pins.txt trl==1.16.0)")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _task(args: argparse.Namespace) -> dict[str, Any]:
    from tests.run.test_learning import TASK

    return {**TASK, "sampling": {"temperature": args.temperature, "max_new_tokens": args.max_new_tokens}}


def _eval_steps(args: argparse.Namespace, steps: int | None = None) -> list[int]:
    """Held-out points of a run of ``steps`` learner steps (``args.steps`` when None): every
    ``args.eval_every``, ``args.steps`` (the equal-step comparison) and the last."""
    last = args.steps if steps is None else steps
    return sorted({s for s in range(args.eval_every, last + 1, args.eval_every)} | {min(args.steps, last), last})


def _lora(args: argparse.Namespace) -> dict[str, Any]:
    return {"lora_rank": args.rank, "lora_alpha": float(args.alpha), "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
            "lora_dropout": 0.0}


# --------------------------------------------------------------------------- gymfleet

def run_gymfleet(args: argparse.Namespace, root: Path, console: Any) -> dict[str, Any]:
    from gymfleet.orchestrator.store import TrajectoryStore
    from gymfleet.run.config import train_config_from_dict
    from gymfleet.run.job import train
    from gymfleet.trainer.bucket import AdapterBucket
    from tests.run.test_learning import TRAIN_WORDS

    cfg = train_config_from_dict({
        "run_id": "vs-trl", "store": str(root / "gymfleet" / "store.db"),
        "metrics_path": str(root / "gymfleet" / "metrics.jsonl"), "bucket": str(root / "gymfleet" / "bucket"),
        "report_dir": str(root / "gymfleet" / "report"), "mode": args.gymfleet_mode, "max_in_flight": args.in_flight,
        "seed": args.seed, "budget": {"max_steps": args.steps},
        "learner": {**_lora(args), "learning_rate": args.lr, "groups_per_step": args.prompts_per_step,
                    "micro_batch_size": args.prompts_per_step * args.group_size, "max_tokens": 256,
                    "publish_every": 1, "dynamic_sampling": {"enabled": False}},
        "max_staleness": args.max_staleness,
        "tasks": [{**_task(args), "instances": TRAIN_WORDS, "group_size": args.group_size}],
    })
    console.print(f"[bold]gymfleet[/bold] ({args.gymfleet_mode}): {args.steps} steps x {args.prompts_per_step} prompts x {args.group_size} samples")
    t0 = time.time()
    outcome = asyncio.run(train(cfg, console=console, live=False))
    wall = time.time() - t0
    if outcome.learner_exitcode != 0:
        raise RuntimeError(f"gymfleet learner exited {outcome.learner_exitcode}")
    bucket = AdapterBucket(cfg.bucket, "vs-trl")
    checkpoints = []
    for step in _eval_steps(args):
        published = bucket.get(step)
        checkpoints.append({"step": step, "wall_s": published.meta["published_at"] - t0, "adapter": published.url})

    async def generated() -> int:
        async with await TrajectoryStore.open(cfg.run.store) as store:
            return len(await store.trajectories("vs-trl", limit=None))

    report = outcome.report.to_dict()
    return {"wall_s": wall, "report_wall_s": report.get("wall_s"), "samples_generated": asyncio.run(generated()),
            "samples_trained": args.steps * args.prompts_per_step * args.group_size,
            # one row per learner iteration; rows with n_groups 0 trained nothing (every sample too stale)
            "train_reward_by_step": [{"step": s["step"], "n_groups": s["n_groups"], "mean_reward": round(s["mean_reward"], 4)}
                                     for s in report.get("steps", [])],
            "checkpoints": checkpoints}


# --------------------------------------------------------------------------- TRL

def say_word_reward(completions: list[Any], word: list[str], **_: Any) -> list[float | None]:
    """TRL reward function: the SayWord env's own reward (reset on the word, step on the reply)."""
    from tests.run.test_learning import SayWordEnv

    async def one(w: str, completion: Any) -> float:
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        env = SayWordEnv()
        await env.reset_async(options={"instance_id": w})
        _, reward, *_rest = await env.step_async(text)
        return float(reward)

    async def every() -> list[float | None]:
        return list(await asyncio.gather(*(one(w, c) for w, c in zip(word, completions))))

    return asyncio.run(every())


def trl_config(args: argparse.Namespace, out: Path, max_completion_length: int) -> Any:
    """TRL's ``GRPOConfig`` matched to gymfleet's learner: one generation per step of
    ``prompts_per_step x group_size`` samples, AdamW at a constant ``args.lr``, grad-norm clip 1.0,
    no KL (``beta=0``), ``num_iterations=1``, no gradient checkpointing (gymfleet's learner does
    not checkpoint); ``max_completion_length`` in tokens."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out / "trainer"), use_cpu=True, bf16=False, max_steps=args.steps,
        per_device_train_batch_size=args.prompts_per_step * args.group_size, gradient_accumulation_steps=1,
        num_generations=args.group_size, max_completion_length=max_completion_length,
        temperature=args.temperature, top_p=1.0, top_k=0, beta=0.0, num_iterations=1,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, optim="adamw_torch", logging_steps=1, save_strategy="no", report_to="none",
        seed=args.seed, disable_tqdm=True, gradient_checkpointing=False,
    )


def run_trl(args: argparse.Namespace, root: Path, console: Any) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from gymfleet.core.models import ModelSpec, resolve_model_dir
    from tests.run.test_learning import TRAIN_WORDS, SayWordEnv

    console.print(f"[bold]TRL[/bold]: {args.steps} steps x {args.prompts_per_step} prompts x {args.group_size} samples")
    out = root / "trl"
    t0 = time.time()
    torch.manual_seed(args.seed)
    model_dir = resolve_model_dir(ModelSpec())
    env = SayWordEnv()

    def prompt(word: str) -> list[dict[str, str]]:
        observation, _ = asyncio.run(env.reset_async(options={"instance_id": word}))
        return [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": observation}]

    dataset = Dataset.from_list([{"prompt": prompt(w), "word": w} for w in TRAIN_WORDS])
    lora = _lora(args)
    peft_config = LoraConfig(r=lora["lora_rank"], lora_alpha=lora["lora_alpha"], lora_dropout=0.0,
                             target_modules=lora["target_modules"], task_type="CAUSAL_LM")
    config = trl_config(args, out, max_completion_length=args.max_new_tokens)
    checkpoints: list[dict[str, Any]] = []
    eval_steps = set(_eval_steps(args))

    class SaveAdapter(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step in eval_steps:
                wall = time.time() - t0
                path = out / f"step-{state.global_step:04d}"
                kwargs["model"].save_pretrained(str(path))
                checkpoints.append({"step": state.global_step, "wall_s": wall, "adapter": str(path)})
                console.print(f"TRL step {state.global_step}: adapter saved at {wall:.1f} s")

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    trainer = GRPOTrainer(model=model, reward_funcs=say_word_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=peft_config, callbacks=[SaveAdapter()])
    with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its log dicts on stdout
        trainer.train()
    wall = time.time() - t0
    rewards = [round(h["reward"], 4) for h in trainer.state.log_history if "reward" in h]
    return {"wall_s": wall, "samples_generated": args.steps * args.prompts_per_step * args.group_size,
            "samples_trained": args.steps * args.prompts_per_step * args.group_size,
            "train_reward_by_step": rewards, "checkpoints": checkpoints}


# --------------------------------------------------------------------------- evaluation

def held_out(args: argparse.Namespace, root: Path, adapter: str | None, name: str) -> dict[str, Any]:
    from gymfleet.orchestrator.config import TaskConfig
    from gymfleet.run.evaluate import evaluate
    from tests.run.test_learning import HELDOUT_WORDS

    task = TaskConfig.model_validate(_task(args))
    result = asyncio.run(evaluate(task, HELDOUT_WORDS[:args.heldout], root / "eval", adapter=adapter, name=name,
                                  samples_per_instance=args.eval_samples, seed=args.seed))
    return reward_summary(result.rewards)


def reward_summary(rewards: list[float]) -> dict[str, Any]:
    """``{"mean_reward", "se", "n"}`` of one held-out point: the mean of ``n`` rollout rewards and
    its standard error, the sample standard deviation over sqrt(n) (0 when n < 2). Rewards need
    not be 0/1, so not ``gymfleet.run.records.binomial_se`` (for 0/1 rewards the two differ by
    sqrt(n / (n - 1)), 1 % at n = 48)."""
    n = len(rewards)
    mean = statistics.fmean(rewards) if n else 0.0
    se = statistics.stdev(rewards) / math.sqrt(n) if n > 1 else 0.0
    return {"mean_reward": round(mean, 4), "se": round(se, 4), "n": n}


def add_heldout_curves(systems: dict[str, dict[str, Any]], start_reward: float,
                       score: Callable[[str, str], dict[str, Any]], console: Any) -> None:
    """Replaces each system's ``checkpoints`` by its ``heldout_curve`` (the shared start at wall
    time 0, then each checkpoint scored by ``score(adapter, name)``, which returns
    ``{"mean_reward", "n"}``), and sets ``final_heldout_reward``; wall times in s, rounded."""
    for name, result in systems.items():
        curve: list[dict[str, Any]] = [{"step": 0, "wall_s": 0.0, "heldout_reward": start_reward}]
        for point in result.pop("checkpoints"):
            r = score(point["adapter"], f"{name}-{point['step']}")
            curve.append({"step": point["step"], "wall_s": round(point["wall_s"], 2), "heldout_reward": r["mean_reward"],
                          "se": r.get("se")})
            console.print(f"{name} step {point['step']}: held-out reward {r['mean_reward']:.3f} (n={r['n']})")
        result["heldout_curve"] = curve
        result["final_heldout_reward"] = curve[-1]["heldout_reward"]
        result["wall_s"] = round(result["wall_s"], 2)


def trained_points(curve: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The curve's points after training started (wall time > 0): the shared starting point
    (untrained or warm start) is nobody's achievement."""
    return [p for p in curve if p["wall_s"] > 0]


def first_reach_s(curve: list[dict[str, Any]], target: float) -> float | None:
    """Wall time (s) of the first trained held-out point at or above ``target``; None when none is."""
    return next((p["wall_s"] for p in trained_points(curve) if p["heldout_reward"] >= target), None)


def curve_agreement(systems: dict[str, dict[str, Any]], reference: str) -> dict[str, Any]:
    """Each other system's held-out curve against ``reference``'s, step by step: at every learner
    step both scored, the difference of means (``system - reference``), its standard error
    ``sqrt(se_a**2 + se_b**2)`` (the two points as independent samples: Miller 2024,
    arXiv:2411.00640, section 4, the unpaired comparison ``gymfleet.run.records.Gain`` makes of
    pass rates; here on mean rewards, which need not be 0/1) and whether the difference is within
    2 of those; ``all_within_2se`` over the steps. Empty when ``reference`` did not run."""
    if reference not in systems:
        return {}
    ref = {p["step"]: p for p in trained_points(systems[reference]["heldout_curve"]) if p.get("se") is not None}
    out: dict[str, Any] = {}
    for name, result in systems.items():
        if name == reference:
            continue
        rows = []
        for p in trained_points(result["heldout_curve"]):
            q = ref.get(p["step"])
            if q is None or p.get("se") is None:
                continue
            se = math.sqrt(p["se"] ** 2 + q["se"] ** 2)
            diff = p["heldout_reward"] - q["heldout_reward"]
            rows.append({"step": p["step"], "diff": round(diff, 4), "se_diff": round(se, 4),
                         "within_2se": abs(diff) <= 2 * se})
        out[f"{name}_vs_{reference}"] = {"by_step": rows, "all_within_2se": bool(rows) and all(r["within_2se"] for r in rows)}
    return out


def time_to_reward(systems: dict[str, dict[str, Any]], fixed_target: float) -> dict[str, Any]:
    """Each system's wall time to first reach TRL's best held-out reward and ``fixed_target``,
    counting trained points only (the shared start at wall time 0 reaches nothing).

    Returns:
        ``{"targets": {name: reward}, "<system>": {name: seconds or None},
        "trl_s_over_<system>_s": {name: ratio or None}}`` with one ratio entry per system other
        than ``trl`` (> 1: that system got there first); the ``trl_best`` target and the ratios
        only when TRL ran.
    """
    targets: dict[str, float | None] = {"fixed": fixed_target}
    if "trl" in systems:
        targets["trl_best"] = max((p["heldout_reward"] for p in trained_points(systems["trl"]["heldout_curve"])),
                                  default=None)
    out: dict[str, Any] = {"targets": targets}
    for name, result in systems.items():
        out[name] = {t: (first_reach_s(result["heldout_curve"], r) if r is not None else None)
                     for t, r in targets.items()}
    if "trl" in systems:
        for name in systems:
            if name == "trl":
                continue
            ratios = {}
            for t in targets:
                ours, theirs = out[name][t], out["trl"][t]
                ratios[t] = round(theirs / ours, 3) if ours and theirs is not None else None
            out[f"trl_s_over_{name}_s"] = ratios
    return out


def plot(path: Path, curves: dict[str, list[dict[str, Any]]],
         title: str = "SayWord, SmolLM2-135M LoRA: gymfleet vs TRL GRPOTrainer") -> str | None:
    """Writes a PNG of each system's held-out curve against wall time; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, points in curves.items():
        ax.plot([p["wall_s"] for p in points], [p["heldout_reward"] for p in points], marker="o", label=name)
    ax.set_xlabel("wall time (s, from the start of each run)")
    ax.set_ylabel("held-out mean reward")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="optimiser steps (both systems)")
    parser.add_argument("--prompts-per-step", type=int, default=4, help="groups (prompts) per step")
    parser.add_argument("--group-size", type=int, default=4, help="samples per prompt (TRL num_generations)")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=16.0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=4, help="held-out evaluation every this many steps")
    parser.add_argument("--heldout", type=int, default=16, help="held-out words (at most 16)")
    parser.add_argument("--eval-samples", type=int, default=4, help="fixed-seed samples per held-out word")
    parser.add_argument("--in-flight", type=int, default=16, help="gymfleet max rollouts in flight")
    parser.add_argument("--max-staleness", type=int, default=2, help="gymfleet max policy lag")
    parser.add_argument("--gymfleet-mode", choices=("async", "sync"), default="async",
                        help="sync: lock-step, generates only what it trains on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.75,
                        help="fixed held-out reward whose first-reach time each system reports")
    parser.add_argument("--only", choices=("both", "gymfleet", "trl"), default="both")
    parser.add_argument("--png", type=Path, default=Path("runs/vs_trl.png"), help="curve plot ('' for none)")
    args = parser.parse_args()
    try:
        import trl
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2

    import gymnasium
    from rich.console import Console

    from tests.run.test_learning import ENV_ID, SayWordEnv

    if ENV_ID not in gymnasium.registry:
        gymnasium.register(ENV_ID, entry_point=SayWordEnv, disable_env_checker=True)  # type: ignore[arg-type]
    console = Console(stderr=True)
    from gymfleet.core.models import ModelSpec, resolve_model_dir

    resolve_model_dir(ModelSpec())  # de-quantise the GGUF once, outside both wall times
    systems: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="gymfleet-vs-trl-") as tmp:
        root = Path(tmp)
        if args.only in ("both", "gymfleet"):
            systems["gymfleet"] = run_gymfleet(args, root, console)
        if args.only in ("both", "trl"):
            systems["trl"] = run_trl(args, root, console)
        console.print("[bold]held-out evaluation[/bold] (untrained, then every saved adapter)")
        base = held_out(args, root, None, "untrained")
        add_heldout_curves(systems, base["mean_reward"], lambda adapter, name: held_out(args, root, adapter, name), console)
    headline = time_to_reward(systems, args.target)
    png = plot(args.png, {k: v["heldout_curve"] for k, v in systems.items()}) if str(args.png) not in ("", ".") else None
    print(json.dumps({
        "setup": {"model": "SmolLM2-135M-Instruct (embedded, float32, CPU)", "task": "SayWord (tests/run/test_learning.py)",
                  "trl_version": trl.__version__, "cpus": os.cpu_count(), "heldout_n_per_point": args.heldout * args.eval_samples,
                  "samples_per_system": args.steps * args.prompts_per_step * args.group_size, **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}},
        "untrained_heldout_reward": base["mean_reward"],
        **systems,
        "time_to_reward": headline,
        "curve_agreement": curve_agreement(systems, "trl"),
        "png": png,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
