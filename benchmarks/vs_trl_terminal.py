"""gymfleet (async and sync) vs TRL's GRPOTrainer on a task with env latency: the terminal easy tier.

The task: ``gymfleet/TerminalEasy-v0`` (``envs/terminal/easy.py``), multi-turn (up to
``--max-turns`` bash turns, then graded), on real local (bubblewrap) sandboxes: each rollout
resets a sandbox, runs the policy's commands in its persistent shell and grades with the
hidden checks. Six templates x eight words are trained on; the same six templates with the four
held-out words are the held-out set (as ``make run``'s ``configs/train-default.yaml``).

Env latency: the easy tier's commands take milliseconds, where an agentic terminal task's
commands build, install and run test suites for seconds to minutes. So during training every
env step (a command, or the grading after ``submit``) first waits an idle, log-normal time
(median ``--step-latency-s``, 10 s by default, sigma ``--latency-sigma``, capped at 60 s;
:func:`register_slow_terminal`), the same for every system (TRL's ``rollout_func`` plays the same
env). ``--step-latency-s 0`` trains on the plain env: on two cores, with no idle time to hide,
asynchrony can only split the cores (``benchmarks/README.md`` has both). Held-out evaluation
runs the plain env (the same rewards).

All systems start from the same adapter: gymfleet's warm start (gold demonstrations, SFT;
``gymfleet.run.warmstart``) is run once, outside every wall time, and each system trains that
adapter further with GRPO: the same LoRA (r, alpha, q/k/v/o, no dropout), learning rate (AdamW,
constant, grad-norm clip 1.0, no KL), sampling (temperature 1, ``--max-new-tokens`` per turn),
group size and samples per step (``--prompts-per-step`` x ``--group-size``), for ``--steps``
learner steps.

* gymfleet: :func:`gymfleet.run.job.train` in ``async`` (staleness ``--max-staleness``, 2 by
  default, importance sampling masks, generation at most ``max_staleness + 1`` steps ahead of the
  learner, as many rollouts in flight as that admits unless ``--in-flight`` says otherwise; the
  threads ``--learner-threads`` / ``--engine-threads``, 2 + 1 by default; objective
  ``--objective``, ``ppo_clip`` by default: TRL's loss, so both learners optimise the same
  objective; with ``dsis`` async collapsed on this task, ``benchmarks/README.md``) and
  ``sync`` mode (generate the step's groups, train, publish, repeat; every CPU to each phase):
  embedded TransformersEngine behind the token-in-token-out gateway, SQLite store, bucket,
  learner process; dynamic sampling off (TRL has none).
* TRL: ``GRPOTrainer`` with ``rollout_func``, TRL's interface for multi-turn environments
  (experimental in TRL 1.16; its OpenEnv examples use it): for each step's prompts (here, the
  instance ids) the function plays every rollout on the same env code gymfleet plays
  (:func:`gymfleet.orchestrator.envfactory.env_factory` on shared ``EnvResources``), generating
  each turn with the trainer's own model (transformers ``generate``, the batch of live rollouts
  at once) and stepping the envs concurrently between turns; it returns the token ids of the
  whole conversation after the prompt with ``env_mask`` 0 on the env's tokens (TRL then trains
  on the model's tokens only) and the env's reward, which the reward function returns. The
  conversation's token ids are built with gymfleet's chat-template deltas
  (``orchestrator/chat_template.py``), so both systems see the same tokens.

Held-out reward: :func:`gymfleet.run.evaluate.evaluate` of each saved adapter on the held-out
instances (``--eval-samples`` fixed-seed samples each), after all runs, so evaluation never
counts in a wall time. A point's wall time is when its adapter existed (the bucket's
``published_at``, the TRL callback), from the start of that system's run. Headline
``time_to_reward``: each system's wall time to FIRST reach TRL's best held-out reward and the
fixed ``--target``; ``trl_s_over_<system>_s`` > 1 when that system got there first. Each
first reach is on that system's own clock, as time-to-accuracy benchmarks count it (MLPerf
Training: train until the target quality, time it), so async keeps learning past ``--steps`` up to
``--async-steps`` (twice ``--steps`` by default): a system that runs its steps faster may train on
more samples in less time. TRL and sync stop at ``--steps``. Every equal-step figure uses steps up
to ``--steps`` only: ``async_over_sync`` is sync's wall time to its ``--steps``-th learner step
(``wall_s_at_steps``, when that step's adapter was published) over async's, and
``curve_agreement`` compares the steps both systems scored (each system's ``samples_trained``
says what its steps trained: async drops samples staler than the bound).

Needs TRL (``make setup`` installs it, the ``bench`` extra) and bubblewrap (``make services``).
Usage: ``python benchmarks/vs_trl_terminal.py [--steps 9] [--async-steps 18] [--systems trl,async,sync] [--seed 0]``
Prints one JSON object on stdout; progress goes to stderr. Not part of ``make bench`` (38-43
minutes at the defaults on two quiet cores, all three systems and held-out evaluation).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from vs_trl import (  # noqa: E402  (the SayWord benchmark's helpers)
    INSTALL_HINT, _eval_steps, _lora, add_heldout_curves, curve_agreement, plot, reward_summary, time_to_reward,
    trl_config)

T = TypeVar("T")
RUN_ID = "vs-trl-terminal"
GENERATE_TOKENS = 16 * 1024
"""Most padded tokens (rows x longest row) of one ``model.generate`` call in TRL's rollouts."""
TEMPLATES = ("write-word", "make-dir", "copy-file", "rename-file", "delete-file", "append-line")
"""The six templates ``make run`` trains on (count-lines and make-executable left out as there)."""


SLOW_ENV_ID = "gymfleet-bench/TerminalEasySlow-v0"
"""TerminalEasy whose every step takes a log-normal extra time (:func:`register_slow_terminal`)."""


def register_slow_terminal() -> None:
    """Registers :data:`SLOW_ENV_ID`: ``gymfleet/TerminalEasy-v0`` (the same tasks, sandboxes and
    grader) whose every step (a command, or the grading after ``submit``) first waits
    ``min(cap, median * lognormal(0, sigma))`` seconds, idle: what an agentic terminal task's
    commands cost when they build, install or run a test suite (Terminal-Bench's tasks take seconds
    to minutes a command), or what a remote sandbox service adds. The wait holds the sandbox, as a
    slow command does. Draws come from ``Random(f"{instance}/{seed}")`` when the reset has a seed
    (gymfleet's rollouts), else from fresh entropy (TRL's ``rollout_func`` resets without one), so
    both systems draw independent latencies per rollout from the same distribution.
    Env kwargs: ``step_latency_s`` (the median, seconds), ``latency_sigma``, ``latency_cap_s``."""
    import random

    import gymnasium

    from gymfleet.envs.terminal.env import TerminalEnv, TerminalEnvConfig

    if SLOW_ENV_ID in gymnasium.registry:
        return

    class SlowStepsConfig(TerminalEnvConfig):
        step_latency_s: float = 0.0
        """Median extra seconds a step takes (0: none)."""
        latency_sigma: float = 0.5
        """Sigma of the log-normal (of the natural log of the factor)."""
        latency_cap_s: float = 60.0
        """No step waits longer than this."""

    class SlowStepsTerminalEnv(TerminalEnv):
        config_class = SlowStepsConfig
        config: SlowStepsConfig

        async def reset_async(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
            instance = (options or {}).get("instance_id")
            self._latency_rng = random.Random(f"{instance}/{seed}") if seed is not None else random.Random()
            return await super().reset_async(seed=seed, options=options)

        async def step_async(self, action: str):
            cfg = self.config
            if cfg.step_latency_s > 0:
                rng = getattr(self, "_latency_rng", None) or random.Random()
                await asyncio.sleep(min(cfg.latency_cap_s, cfg.step_latency_s * rng.lognormvariate(0.0, cfg.latency_sigma)))
            return await super().step_async(action)

    easy_kwargs = dict(gymnasium.spec("gymfleet/TerminalEasy-v0").kwargs)
    gymnasium.register(SLOW_ENV_ID, entry_point=SlowStepsTerminalEnv, kwargs=easy_kwargs, disable_env_checker=True)


def _instances(words: list[str]) -> list[str]:
    return [f"{t}-{w}" for w in words for t in TEMPLATES]


def _task(args: argparse.Namespace, instances: list[str], slow: bool = True) -> dict[str, Any]:
    """The task; ``slow``: on :data:`SLOW_ENV_ID` with ``args``' latency (training), else on the
    plain ``TerminalEasy-v0`` (held-out evaluation: the same rewards, no waiting)."""
    env = ({"env_id": SLOW_ENV_ID, "env_kwargs": {"sandbox": "local", "step_latency_s": args.step_latency_s,
                                                  "latency_sigma": args.latency_sigma}}
           if slow and args.step_latency_s > 0 else {"env_id": "gymfleet/TerminalEasy-v0", "env_kwargs": {"sandbox": "local"}})
    return {"name": "terminal", **env,
            "instances": instances, "group_size": args.group_size, "max_turns": args.max_turns,
            "turn_timeout_s": 600, "sampling": {"temperature": args.temperature, "max_new_tokens": args.max_new_tokens}}


def _steps(args: argparse.Namespace, mode: str) -> int:
    """Learner steps a gymfleet run in ``mode`` takes: ``--async-steps`` in async, else ``--steps``."""
    return args.async_steps if mode == "async" else args.steps


def _config(args: argparse.Namespace, root: Path, mode: str, slow: bool = True) -> Any:
    from gymfleet.run.config import train_config_from_dict
    from gymfleet.envs.terminal.easy import TRAIN_WORDS

    return train_config_from_dict({
        "run_id": RUN_ID, "store": str(root / "store.db"), "metrics_path": str(root / "metrics.jsonl"),
        "bucket": str(root / "bucket"), "report_dir": str(root / "report"), "mode": mode,
        "max_in_flight": args.in_flight, "seed": args.seed, "budget": {"max_steps": _steps(args, mode)},
        **({"learner_threads": args.learner_threads} if args.learner_threads and mode == "async" else {}),
        **({"engine_threads": args.engine_threads} if args.engine_threads and mode == "async" else {}),
        "learner": {**_lora(args), "learning_rate": args.lr, "groups_per_step": args.prompts_per_step,
                    "max_tokens": 1024,
                    "publish_every": 1, "dynamic_sampling": {"enabled": False}, "objective": args.objective},
        "max_staleness": args.max_staleness,
        "warmstart": {"enabled": True, "episodes_per_instance": 1, "max_instances_per_task": 16, "epochs": 4,
                      "learning_rate": 1e-3, "batch_size": 8},
        "tasks": [_task(args, _instances(TRAIN_WORDS), slow)],
    })


# --------------------------------------------------------------------------- the shared start

def warm_start(args: argparse.Namespace, root: Path, console: Any) -> Path:
    """Runs gymfleet's warm start once; returns the folder of the published v1 adapter."""
    from gymfleet.run.warmstart import describe, run_warm_start
    from gymfleet.trainer.bucket import AdapterBucket

    cfg = _config(args, root, "sync", slow=False)  # the demonstrations need no waiting
    console.print("[bold]warm start[/bold] (shared by every system, outside every wall time)")
    outcome = asyncio.run(run_warm_start(cfg, console))
    console.print(describe(outcome), markup=False, highlight=False)
    adapter = AdapterBucket(cfg.bucket, RUN_ID).get(outcome.sft.version)
    return Path(adapter.url)


# --------------------------------------------------------------------------- gymfleet

def run_gymfleet(args: argparse.Namespace, warm_root: Path, root: Path, mode: str, console: Any) -> dict[str, Any]:
    """The training job from the warm start's bucket (copied), :func:`_steps` GRPO steps."""
    from gymfleet.run.job import train
    from gymfleet.trainer.bucket import AdapterBucket

    shutil.copytree(warm_root / "bucket", root / "bucket")
    shutil.copy2(warm_root / "store.db", root / "store.db")  # the demonstrations' run (never trained on by GRPO)
    cfg = _config(args, root, mode)
    console.print(f"[bold]gymfleet {mode}[/bold]: {_steps(args, mode)} steps x {args.prompts_per_step} prompts x {args.group_size} samples")
    t0 = time.time()
    outcome = asyncio.run(train(cfg, console=console, live=False))
    wall = time.time() - t0
    if outcome.learner_exitcode != 0:
        raise RuntimeError(f"gymfleet learner exited {outcome.learner_exitcode}")
    bucket = AdapterBucket(cfg.bucket, RUN_ID)
    by_step = {}
    for version in bucket.versions():
        published = bucket.get(version)
        step = published.meta.get("step")
        if isinstance(step, int) and step > 0:
            by_step[step] = published
    checkpoints = [{"step": s, "wall_s": by_step[s].meta["published_at"] - t0, "adapter": by_step[s].url}
                   for s in _eval_steps(args, _steps(args, mode)) if s in by_step]
    at_steps = by_step.get(args.steps)
    report = outcome.report.to_dict()
    steps = report.get("steps", [])
    return {"wall_s": wall, "report_wall_s": report.get("wall_s"), "steps": _steps(args, mode),
            "wall_s_at_steps": round(at_steps.meta["published_at"] - t0, 2) if at_steps else None,
            # a sample lagging the learner by more than max_staleness is dropped, not trained
            "samples_trained": sum(len(s["filter"]["staleness"]) for s in steps),
            "samples_stale": sum(s["filter"].get("samples_stale", 0) for s in steps)
                             + sum(d["filter"].get("samples_stale", 0) for d in report.get("dropped_claims", [])),
            "staleness_histogram": report.get("staleness_histogram"),
            "learner_idle_fraction": report.get("learner_idle_fraction"),
            "generation_idle_fraction": report.get("generation_idle_fraction"),
            "train_reward_by_step": [{"step": s["step"], "n_groups": s["n_groups"], "mean_reward": round(s["mean_reward"], 4)}
                                     for s in report.get("steps", [])],
            "checkpoints": checkpoints}


# --------------------------------------------------------------------------- TRL

class LoopThread:
    """An event loop in a thread of its own: the envs (and their shared resources) live on it,
    while TRL's trainer calls ``rollout_func`` synchronously."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="envs", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def gather(self, coros: list[Coroutine[Any, Any, T]], return_exceptions: bool = False) -> list[T]:
        async def every() -> list[T]:
            return list(await asyncio.gather(*coros, return_exceptions=return_exceptions))

        return self.run(every())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class TerminalRollouts:
    """TRL ``rollout_func``: plays each prompt's instance on the terminal env, several turns.

    Called with the step's prompts (instance ids, repeated ``num_generations`` times by TRL's
    sampler) and the trainer; returns ``prompt_ids``, ``completion_ids`` (the model's tokens and
    the env's, turn after turn), ``logprobs`` (the sampling distribution's, 0 on env tokens),
    ``env_mask`` (1 on the model's tokens) and ``env_reward`` (forwarded to the reward function).
    """

    def __init__(self, args: argparse.Namespace, tokenizer: Any) -> None:
        from gymfleet.envs.resources import EnvResources, ResourcesConfig
        from gymfleet.orchestrator.chat_template import ChatTemplate
        from gymfleet.orchestrator.config import TaskConfig
        from gymfleet.orchestrator.envfactory import env_factory

        self.args, self.tokenizer = args, tokenizer
        self.template = ChatTemplate(tokenizer)
        self.loops = LoopThread()
        self._resources_cm = EnvResources.open(ResourcesConfig(), run_id=RUN_ID + "-trl")
        self.resources = self.loops.run(self._resources_cm.__aenter__())
        self.make = env_factory(TaskConfig.model_validate(_task(args, ["write-word-apple"])), self.resources)
        self.env_s = 0.0  # wall time spent waiting on envs (reset, steps), summed over calls

    def close(self) -> None:
        self.loops.run(self._resources_cm.__aexit__(None, None, None))
        self.loops.stop()

    def _generate(self, model: Any, inputs: list[list[int]]) -> list[tuple[list[int], list[float], bool]]:
        """Samples a reply to each input; rows go to ``model.generate`` in chunks of at most
        ``GENERATE_TOKENS`` padded tokens, shortest first, so that one long conversation does not
        pad every row to its length (seed 2: a batch of 16 padded to a command's 7,000-token
        output took 24 GiB and the OOM killer)."""
        if len(inputs) * max(len(x) for x in inputs) <= GENERATE_TOKENS:
            return self._generate_chunk(model, inputs)
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        chunks: list[list[int]] = [[]]
        for i in order:
            if chunks[-1] and (len(chunks[-1]) + 1) * len(inputs[i]) > GENERATE_TOKENS:
                chunks.append([])
            chunks[-1].append(i)
        results: dict[int, tuple[list[int], list[float], bool]] = {}
        for chunk in chunks:
            results.update(zip(chunk, self._generate_chunk(model, [inputs[i] for i in chunk])))
        return [results[i] for i in range(len(inputs))]

    def _generate_chunk(self, model: Any, inputs: list[list[int]]) -> list[tuple[list[int], list[float], bool]]:
        import torch

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.template.eos_id
        width = max(len(x) for x in inputs)
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in inputs])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in inputs])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=self.args.temperature,
                                 top_k=0, top_p=1.0, max_new_tokens=self.args.max_new_tokens, pad_token_id=pad,
                                 eos_token_id=self.template.eos_id, output_scores=True, return_dict_in_generate=True)
        new = out.sequences[:, width:]
        logps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)  # (B, T, V)
        picked = logps.gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (B, T)
        results = []
        for row, lp in zip(new.tolist(), picked.tolist()):
            n = row.index(self.template.eos_id) + 1 if self.template.eos_id in row else len(row)
            results.append((row[:n], lp[:n], self.template.eos_id in row[:n]))
        return results

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        from gymfleet.core.records import Message

        envs = [self.make() for _ in prompts]
        t = time.time()
        firsts = self.loops.gather([env.reset_async(options={"instance_id": str(p), "max_turns": self.args.max_turns})
                                    for env, p in zip(envs, prompts)])
        self.env_s += time.time() - t
        histories = [[Message("system", env.system_prompt), Message("user", obs)] for env, (obs, _) in zip(envs, firsts)]
        prompt_ids = [self.template.encode(self.template.render(h, True)) for h in histories]
        completions: list[list[int]] = [[] for _ in prompts]
        masks: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        rewards = [0.0] * len(prompts)
        live = list(range(len(prompts)))
        try:
            context = int(trainer.model.config.max_position_embeddings)
            for _turn in range(self.args.max_turns):
                # a conversation that fills the context window ends there with reward 0, as
                # gymfleet's rollouts end truncated on ContextLengthError (a policy's command can
                # print more than 8,192 tokens; generating past it took 24 GiB and the OOM killer)
                live = [i for i in live if len(prompt_ids[i]) + len(completions[i]) < context]
                if not live:
                    break
                outs = self._generate(trainer.model, [prompt_ids[i] + completions[i] for i in live])
                replies = {}
                for i, (ids, lps, eos) in zip(live, outs):
                    completions[i] += ids
                    masks[i] += [1] * len(ids)
                    logprobs[i] += lps
                    replies[i] = (self.template.decode(ids), eos)
                t = time.time()
                steps = self.loops.gather([envs[i].step_async(replies[i][0]) for i in live])
                self.env_s += time.time() - t
                still = []
                for i, (obs, reward, terminated, truncated, _info) in zip(live, steps):
                    if terminated or truncated:
                        rewards[i] = float(reward)
                        continue
                    content, eos = replies[i]
                    history = histories[i]
                    tail = self.template.turn_end(history[:], content, eos)
                    history.append(Message("assistant", content))
                    delta = self.template.message_delta(history, Message("user", obs))
                    history.append(Message("user", obs))
                    delta += self.template.generation_prompt(history)
                    env_ids = self.template.encode(tail + delta)
                    completions[i] += env_ids
                    masks[i] += [0] * len(env_ids)
                    logprobs[i] += [0.0] * len(env_ids)
                    still.append(i)
                live = still
        finally:
            self.loops.gather([env.close_async() for env in envs], return_exceptions=True)
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": logprobs, "env_mask": masks,
                "env_reward": rewards}


def env_reward(completions: list[Any], env_reward: list[float], **_: Any) -> list[float]:
    """TRL reward function: the env's own reward, carried from ``rollout_func``."""
    return [float(r) for r in env_reward]


def run_trl(args: argparse.Namespace, warm_adapter: Path, root: Path, console: Any) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from gymfleet.core.models import ModelSpec, resolve_model_dir
    from gymfleet.envs.terminal.easy import TRAIN_WORDS

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    console.print(f"[bold]TRL[/bold] (rollout_func): {args.steps} steps x {args.prompts_per_step} prompts x {args.group_size} samples")
    out = root / "trl"
    t0 = time.time()
    torch.manual_seed(args.seed)
    model_dir = resolve_model_dir(ModelSpec())
    dataset = Dataset.from_list([{"prompt": i} for i in _instances(TRAIN_WORDS)])
    config = trl_config(args, out, max_completion_length=args.max_turns * (args.max_new_tokens + 512))
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

    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(warm_adapter), is_trainable=True)  # the shared warm start
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    rollouts = TerminalRollouts(args, tokenizer)
    try:
        trainer = GRPOTrainer(model=model, reward_funcs=env_reward, args=config, train_dataset=dataset,
                              processing_class=tokenizer, rollout_func=rollouts, callbacks=[SaveAdapter()])
        with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its log dicts on stdout
            trainer.train()
    finally:
        rollouts.close()
    wall = time.time() - t0
    rewards = [round(h["reward"], 4) for h in trainer.state.log_history if "reward" in h]
    return {"wall_s": wall, "env_wait_s": round(rollouts.env_s, 2),
            "samples_trained": args.steps * args.prompts_per_step * args.group_size,
            "train_reward_by_step": rewards, "checkpoints": checkpoints}


# --------------------------------------------------------------------------- evaluation

def held_out(args: argparse.Namespace, root: Path, adapter: str, name: str) -> dict[str, Any]:
    from gymfleet.envs.terminal.easy import HELDOUT_WORDS
    from gymfleet.orchestrator.config import TaskConfig
    from gymfleet.run.evaluate import evaluate

    task = TaskConfig.model_validate(_task(args, _instances(HELDOUT_WORDS), slow=False))
    result = asyncio.run(evaluate(task, _instances(HELDOUT_WORDS), root / "eval", adapter=adapter, name=name,
                                  samples_per_instance=args.eval_samples, seed=args.seed))
    return reward_summary(result.rewards)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=9, help="learner steps (TRL and sync; async: --async-steps)")
    parser.add_argument("--prompts-per-step", type=int, default=4, help="groups (prompts) per step")
    parser.add_argument("--group-size", type=int, default=4, help="samples per prompt (TRL num_generations)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=16.0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=32, help="per turn")
    parser.add_argument("--max-turns", type=int, default=2, help="bash turns before grading (the tasks' own limit: 2)")
    parser.add_argument("--async-steps", type=int, default=None,
                        help="gymfleet async's learner steps (default: 2 x --steps): first reaches are timed on "
                             "each system's own clock, so the faster system may train on more samples; equal-step "
                             "figures use steps up to --steps")
    parser.add_argument("--eval-every", type=int, default=3, help="held-out evaluation every this many steps")
    parser.add_argument("--eval-samples", type=int, default=2, help="fixed-seed samples per held-out instance (24)")
    parser.add_argument("--in-flight", type=int, default=None,
                        help="gymfleet max rollouts in flight (default: what the staleness gate admits, "
                             "(max_staleness + 1) x prompts-per-step x group-size)")
    parser.add_argument("--step-latency-s", type=float, default=10.0,
                        help="median extra seconds each env step takes (log-normal; 0: the plain env)")
    parser.add_argument("--latency-sigma", type=float, default=0.5, help="sigma of the step latency's log-normal")
    parser.add_argument("--learner-threads", type=int, default=2,
                        help="gymfleet async: the learner's torch threads (sync uses every CPU)")
    parser.add_argument("--engine-threads", type=int, default=1, help="gymfleet async: the engine's torch threads")
    parser.add_argument("--objective", default="ppo_clip", choices=("dsis", "ppo_clip", "none"),
                        help="gymfleet's policy objective (trainer/loss.py); ppo_clip is TRL's GRPO loss "
                             "(tests/trainer/test_trl_parity.py), so both learners optimise the same objective; "
                             "on-policy (sync) all three give the same gradient")
    parser.add_argument("--max-staleness", type=int, default=2,
                        help="gymfleet async: max policy lag; async's pipeline is max_staleness + 1 steps deep, "
                             "so at 1 it can at best double sync's speed (benchmarks/README.md)")
    parser.add_argument("--systems", default="trl,async,sync", help="comma-separated: trl, async, sync")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.6, help="fixed held-out reward whose first-reach time is reported")
    parser.add_argument("--png", type=Path, default=Path("runs/vs_trl_terminal.png"), help="curve plot ('' for none)")
    args = parser.parse_args()
    if args.async_steps is None:
        args.async_steps = 2 * args.steps
    if args.async_steps < args.steps:
        print(f"--async-steps ({args.async_steps}) must be at least --steps ({args.steps})", file=sys.stderr)
        return 2
    if args.in_flight is None:
        args.in_flight = (args.max_staleness + 1) * args.prompts_per_step * args.group_size
    systems_wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not systems_wanted or set(systems_wanted) - {"trl", "async", "sync"}:
        print(f"--systems: pick from trl, async, sync (got {args.systems!r})", file=sys.stderr)
        return 2
    try:
        import trl
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    from rich.console import Console

    from gymfleet.core.models import ModelSpec, resolve_model_dir

    console = Console(stderr=True)
    register_slow_terminal()
    resolve_model_dir(ModelSpec())  # de-quantise the GGUF once, outside every wall time
    systems: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="gymfleet-vs-trl-terminal-") as tmp:
        root = Path(tmp)
        warm_root = root / "warm"
        warm_adapter = warm_start(args, warm_root, console)
        for name in systems_wanted:
            if name == "trl":
                systems["trl"] = run_trl(args, warm_adapter, root, console)
            else:
                systems[f"gymfleet_{name}"] = run_gymfleet(args, warm_root, root / name, name, console)
        console.print("[bold]held-out evaluation[/bold] (the warm start, then every saved adapter)")
        start = held_out(args, root, str(warm_adapter), "warm-start")
        console.print(f"warm start: held-out reward {start['mean_reward']:.3f} (n={start['n']})")
        add_heldout_curves(systems, start["mean_reward"], lambda adapter, name: held_out(args, root, adapter, name), console)
    headline = time_to_reward(systems, args.target)
    speed = None
    if {"gymfleet_async", "gymfleet_sync"} <= systems.keys():
        sync_s, async_s = systems["gymfleet_sync"]["wall_s_at_steps"], systems["gymfleet_async"]["wall_s_at_steps"]
        speed = round(sync_s / async_s, 3) if sync_s and async_s else None
    title = f"TerminalEasy, env steps {args.step_latency_s:g} s median; SmolLM2-135M LoRA, one warm start"
    png = plot(args.png, {k: v["heldout_curve"] for k, v in systems.items()}, title) if str(args.png) not in ("", ".") else None
    print(json.dumps({
        "setup": {"model": "SmolLM2-135M-Instruct (embedded, float32, CPU)",
                  "task": "gymfleet/TerminalEasy-v0, 6 templates x 8 words; held-out 6 x 4 words",
                  "env_latency": (f"training steps wait min(60, {args.step_latency_s} s x lognormal(0, {args.latency_sigma}))"
                                  " each (held-out evaluation: none)" if args.step_latency_s > 0 else "none"),
                  "trl_version": trl.__version__, "trl_api": "GRPOTrainer(rollout_func=...) with env_mask",
                  "cpus": os.cpu_count(), "heldout_n_per_point": 24 * args.eval_samples,
                  "samples_per_system": args.steps * args.prompts_per_step * args.group_size,
                  "samples_async": args.async_steps * args.prompts_per_step * args.group_size,
                  "load_avg_at_end": list(os.getloadavg()),
                  **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}},
        "warm_start_heldout_reward": start["mean_reward"],
        **systems,
        "time_to_reward": headline,
        "async_over_sync": speed,
        "curve_agreement": {**curve_agreement(systems, "trl"),
                            **curve_agreement({k: v for k, v in systems.items() if k != "trl"}, "gymfleet_sync")},
        "png": png,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
