"""Synthetic runs for the viewer's tests, benchmark and docs screenshots, written through the real store.

A run here looks like a training run's store: two tasks, groups of G samples, policy versions that
grow over the run, rewards that rise with them, a few failed rollouts of every class, turns of
system / user / assistant messages, and token arrays whose loss mask covers the assistant turns.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gymfleet.core.records import Message, RolloutStatus, Trajectory
from gymfleet.orchestrator.store import GroupSpec, TrajectoryStore

TASKS = (("terminal", "gymfleet/TerminalEasy-v0"), ("miniwob", "gymfleet/miniwob.click-test-2-v0"))
WORDS = ("orbit", "velvet", "canyon", "harbor", "ember", "quartz", "lumen", "tundra")


@dataclass(frozen=True)
class Turn:
    """One action of the policy and what the env answered."""

    action: str
    observation: str


def trajectory(run_id: str, group_id: str, idx: int, *, env_id: str, instance_id: str, version: int, reward: float,
               turns: list[Turn], system: str = "You are an agent. Answer with one ```bash block.",
               prompt: str = "Task: write the word into /tmp/out.txt", status: RolloutStatus = RolloutStatus.ok,
               reason: str = "", metrics: dict | None = None, seed: int = 0,
               encode: Callable[[str], list[int]] | None = None) -> Trajectory:
    """One trajectory whose token arrays follow its messages: env tokens (mask 0) for the system
    prompt, the task and each observation, policy tokens (mask 1, logprob, ``version``) for each
    action. ``encode`` (a tokenizer's) makes real ids; None: random ids, one per 4 characters."""
    rng = np.random.default_rng(seed)
    messages = [Message("system", system), Message("user", prompt)]
    parts: list[tuple[str, int]] = [(system, 0), (prompt, 0)]
    for turn in turns:
        messages += [Message("assistant", turn.action), Message("user", turn.observation)]
        parts += [(turn.action, 1), (turn.observation, 0)]
    ids, mask = [], []
    for text, m in parts:
        piece = encode(text) if encode else rng.integers(100, 49000, size=max(2, len(text) // 4)).tolist()
        ids += piece
        mask += [m] * len(piece)
    mask_a = np.array(mask, dtype=np.uint8)
    logprobs = np.where(mask_a == 1, -rng.exponential(0.4, size=len(ids)), 0.0).astype(np.float32)
    versions = np.where(mask_a == 1, version, -1).astype(np.int32)
    return Trajectory(f"{group_id}/{idx}/a1", run_id, group_id, env_id, instance_id, np.array(ids, np.int32), mask_a,
                      logprobs, versions, messages, reward, dict(metrics or {}, n_turns=len(turns)), status, reason,
                      {"generation_s": 0.4 + rng.random(), "env_s": 0.1 + rng.random() / 5, "total_s": 1.0 + rng.random()})


def _page_text(rng: random.Random, n_chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < n_chars:
        words.append(rng.choice(WORDS + ("button", "div", "click", "the", "form", "input", "ok", "cancel")))
    return " ".join(words)


def _sample(rng: random.Random, run_id: str, group: GroupSpec, idx: int, version: int, n_versions: int,
            observation_chars: int = 0) -> Trajectory:
    p = 0.2 + 0.7 * version / max(n_versions - 1, 1)
    word = group.instance_id.rsplit("-", 1)[-1]
    roll = rng.random()
    if roll < 0.02:
        status, reward, reason = RolloutStatus.infra_error, 0.0, "SandboxLostError: the container was removed mid-command"
    elif roll < 0.04:
        status, reward, reason = RolloutStatus.truncated, 0.0, "env truncated the episode after 3 turns"
    else:
        status, reward, reason = RolloutStatus.ok, float(rng.random() < p), ""
    if group.task == "miniwob":
        action = f'click(text="{"ONE" if reward else "TWO"}")'
        turns = [Turn(action, "Clicked. The episode is over." if reward else "Wrong button: reward 0.")]
        prompt = "Click button ONE." + (f"\n\nPage text:\n{_page_text(rng, observation_chars)}" if observation_chars else "")
    else:
        action = f"```bash\necho {word if reward else word[::-1]} > /tmp/out.txt\n```"
        turns = [Turn(action, "exit code 0\n"), Turn("submit", f"tests: {'1 passed' if reward else '1 failed'}")]
        prompt = f"Write the word {word} into /tmp/out.txt" + (
            f"\n\n$ ls -la\n{_page_text(rng, observation_chars)}" if observation_chars else "")
    grading = {"tests": {"passed": int(reward), "failed": int(not reward)}}
    return trajectory(run_id, group.group_id, idx, env_id=group.env_id, instance_id=group.instance_id, version=version,
                      reward=reward, turns=turns, prompt=prompt, status=status, reason=reason,
                      metrics={"grading": grading}, seed=rng.randrange(2**31))


async def fill_run(store: TrajectoryStore, run_id: str, n_groups: int, *, group_size: int = 4, n_versions: int = 8,
                   seed: int = 0, config: dict | None = None, flush_every: int = 2000,
                   observation_chars: int = 0) -> list[GroupSpec]:
    """Starts ``run_id`` in ``store`` and writes ``n_groups`` complete groups (G = ``group_size``)
    through the work queue, the policy version rising from 0 to ``n_versions - 1`` over the run;
    ``observation_chars`` of page text (or command output) lengthen each task's prompt."""
    rng = random.Random(seed)
    await store.start_run(run_id, config or {"run_id": run_id, "tasks": [{"name": t, "env_id": e} for t, e in TASKS]})
    groups = []
    for g in range(n_groups):
        task, env_id = TASKS[g % len(TASKS)]
        instance = f"click-test-2@{g}" if task == "miniwob" else f"write-word-{WORDS[g % len(WORDS)]}-{g}"
        group = GroupSpec(f"{run_id}/{task}/p0/{instance}", run_id, task, env_id, instance, group_size)
        store.create_group(group)
        version = g * n_versions // max(n_groups, 1)
        for i, sample_id in enumerate(group.sample_ids()):
            traj = _sample(rng, run_id, group, i, version, n_versions, observation_chars)
            store.start_sample(sample_id, traj.rollout_id)
            store.add(traj, sample_id=sample_id, task=task)
        groups.append(group)
        if (g + 1) * group_size % flush_every < group_size:
            await store.flush()
    await store.flush()
    return groups
