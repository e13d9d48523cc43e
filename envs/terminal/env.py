"""TerminalEnv: Terminal-Bench-style tasks solved with bash in a sandbox, graded by hidden tests."""

from __future__ import annotations

import asyncio
import shlex
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from gymfleet.envs.actions import bash_block
from gymfleet.envs.base import AgentEnv, Policy, ScriptedPolicy
from gymfleet.envs.errors import SandboxStartError, TaskError
from gymfleet.envs.sandbox import get_backend
from gymfleet.envs.sandbox.base import Sandbox, SandboxBackend, SandboxLabels, SandboxSpec
from gymfleet.envs.terminal import prompts
from gymfleet.envs.terminal.actions import Command, Submit, parse_action
from gymfleet.envs.terminal.grader import GradeReport, TestStatus, grade
from gymfleet.envs.terminal.shell import PersistentShell, scratch_dir
from gymfleet.envs.terminal.task import BUILTIN_TASKS_DIR, Task, load_tasks


class TerminalEnvConfig(BaseModel):
    """Arguments of :class:`TerminalEnv` (strings from ``--env-arg`` are coerced)."""

    model_config = ConfigDict(extra="forbid")

    sandbox: str = "auto"
    """Sandbox backend: ``auto`` (Docker when a daemon answers, else local), ``docker``, ``local``."""
    tasks_dir: Path = BUILTIN_TASKS_DIR
    """Folder of task folders; the built-in tasks by default."""
    task_ids: list[str] | None = None
    """Only these tasks (a list, or one comma-separated string); all by default."""
    run_id: str = "adhoc"
    """Label put on every sandbox, so that a run's leftovers can be reaped."""
    max_output_bytes: int = 16 * 1024
    """Per stream, bytes of a command's output the agent sees (head and tail)."""
    image_prefix: str = "gymfleet/"
    """Docker image of a task when not built here: ``<image_prefix><task image>:latest``."""
    build_images: bool = True
    """On Docker, build a task's image from ``images/<image>`` when missing (content-hash tag)."""

    @field_validator("task_ids", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return [t.strip() for t in value.split(",") if t.strip()] if isinstance(value, str) else value


@dataclass
class _Episode:
    task: Task
    sandbox: Sandbox
    shell: PersistentShell
    scratch_dir: str
    turn: int = 0
    agent_time_s: float = 0.0
    done: bool = False


class TerminalEnv(AgentEnv):
    """Terminal tasks: an agent types bash in a sandbox until it submits; hidden tests grade.

    ## Description
    Each instance is a task folder (``envs/terminal/tasks/<task_id>/``, format in
    ``envs/terminal/README.md``) in the spirit of Terminal-Bench: an instruction, a setup
    script, a gold solution and hidden tests. Reset starts a sandbox (Docker or bubblewrap),
    copies the task's ``files/`` and runs ``setup.sh``.

    ## Observation
    Text. First the instruction; after each command its exit code, stdout and stderr (head and
    tail when long) and a timeout notice; after a malformed turn, what the format is.

    ## Action
    Text holding exactly one fenced ```` ```bash ```` block (run in a persistent shell: cwd,
    exported variables and functions survive between turns), or ``submit`` (alone, or an
    empty ```` ```submit ```` block) to finish. ``noop_action`` is ``"submit"``.

    ## Reward
    0 on every step but the last; on the last, 1 when every hidden test passed (skipped is not
    passed), else 0. The tests are copied into a fresh random folder only after the agent is
    done and write a JSON result file; a missing or malformed file is a grading error (0).

    ## Episode end
    Terminated when the agent submits. Truncated after ``max_agent_turns`` turns or when the
    agent's commands have used ``agent_timeout_s`` seconds; the end state is graded anyway, as
    Terminal-Bench does after an agent timeout. The sandbox is released once graded.

    ## Arguments
    See :class:`TerminalEnvConfig`; ``sandbox`` may also be a ``SandboxBackend`` object.

    ## Version history
    * v0: initial version (13 built-in tasks).
    """

    noop_action = "submit"

    def __init__(self, sandbox: str | SandboxBackend = "auto", **kwargs: Any) -> None:
        super().__init__()
        name = sandbox if isinstance(sandbox, str) else sandbox.name
        self.config = TerminalEnvConfig(sandbox=name, **kwargs)
        self.tasks = load_tasks(Path(self.config.tasks_dir), self.config.task_ids)
        self._backend: SandboxBackend | None = None if isinstance(sandbox, str) else sandbox
        self._episode: _Episode | None = None
        self._image_tags: dict[str, str] = {}

    @property
    def system_prompt(self) -> str:
        return prompts.SYSTEM_PROMPT

    def instance_ids(self) -> list[str]:
        return list(self.tasks)

    @property
    def backend(self) -> SandboxBackend:
        """The sandbox backend, resolved on first use (so that listing ids needs none)."""
        if self._backend is None:
            self._backend = get_backend(self.config.sandbox)
        return self._backend

    async def reset_async(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        await self.close_async()
        task = self._pick(seed, options)
        spec = self._spec(task, await self._image(task))
        sandbox = self.backend.create(spec, SandboxLabels(run_id=self.config.run_id))
        try:
            await sandbox.start()
            scratch = scratch_dir(sandbox)
            await self._prepare(sandbox, task, scratch)
        except BaseException:
            await sandbox.close()
            raise
        self._episode = _Episode(task, sandbox, PersistentShell(sandbox, scratch), scratch)
        info = {
            "instance_id": task.task_id,
            "difficulty": task.config.difficulty,
            "category": task.config.category,
            "max_turns": task.config.max_agent_turns,
            "sandbox": self.backend.name,
            "isolated": sandbox.isolated,
        }
        return prompts.first_observation(task), info

    async def step_async(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        ep = self._episode
        if ep is None or ep.done:
            raise RuntimeError("TerminalEnv.step called without an episode in progress: call reset() first")
        ep.turn += 1
        limit = ep.task.config.max_agent_turns
        info: dict[str, Any] = {"instance_id": ep.task.task_id, "turn": ep.turn}
        parsed = parse_action(action)
        if isinstance(parsed, Submit):
            return await self._finish(ep, "You submitted.", info, truncated=False)
        if isinstance(parsed, Command):
            budget_s = ep.task.config.agent_timeout_s - ep.agent_time_s
            result = await ep.shell.run(parsed.script, timeout_s=min(ep.task.config.timeout_s, budget_s))
            ep.agent_time_s += result.duration_s
            info.update(exit_code=result.exit_code, timed_out=result.timed_out)
            obs = prompts.command_observation(result, ep.turn, limit)
        else:
            info["malformed"] = parsed.reason
            obs = prompts.malformed_observation(parsed.reason, ep.turn, limit)
        if ep.turn >= limit:
            return await self._finish(ep, f"{obs}\n\nTurn limit ({limit}) reached.", info, truncated=True)
        if ep.agent_time_s >= ep.task.config.agent_timeout_s:
            why = f"{obs}\n\nCommand time budget ({ep.task.config.agent_timeout_s:g} s) used up."
            return await self._finish(ep, why, info, truncated=True)
        return obs, 0.0, False, False, info

    async def end_async(self, reason: str) -> tuple[float, dict[str, Any]]:
        """Grades the end state now (the caller's turn limit came first), as the env's own limit does."""
        ep = self._episode
        if ep is None or ep.done:
            return 0.0, {}
        info: dict[str, Any] = {"instance_id": ep.task.task_id, "turn": ep.turn, "ended_by_caller": reason}
        _, reward, _, _, info = await self._finish(ep, reason, info, truncated=True)
        return reward, info

    async def close_async(self) -> None:
        ep, self._episode = self._episode, None
        if ep is not None:
            await ep.sandbox.close()  # idempotent: a graded episode's sandbox is already closed

    def gold_policy(self) -> Policy:
        if self._episode is None:
            raise RuntimeError("TerminalEnv.gold_policy needs an episode: call reset() first")
        return ScriptedPolicy([bash_block(self._episode.task.solution_script), "submit"])

    # ---- helpers -------------------------------------------------------------------------

    def _pick(self, seed: int | None, options: dict[str, Any] | None) -> Task:
        ids = self.instance_ids()
        if options and options.get("instance_id") is not None:
            instance_id = str(options["instance_id"])
            if instance_id not in self.tasks:
                raise KeyError(f"unknown terminal task {instance_id!r}; known: {', '.join(ids)}")
            return self.tasks[instance_id]
        index = seed if seed is not None else int(self.np_random.integers(len(ids)))
        return self.tasks[ids[index % len(ids)]]

    async def _image(self, task: Task) -> str:
        """The task's image; on Docker, built from ``images/<image>`` first if it is missing."""
        name = task.config.image
        if self.backend.name != "docker" or not self.config.build_images:
            return f"{self.config.image_prefix}{name}:latest"
        if name not in self._image_tags:
            from gymfleet.envs.images import ensure_image  # needs the docker SDK and a daemon

            self._image_tags[name] = await asyncio.to_thread(ensure_image, name)
        return self._image_tags[name]

    def _spec(self, task: Task, image: str) -> SandboxSpec:
        return SandboxSpec(
            image=image,
            network=task.config.network,
            max_output_bytes=self.config.max_output_bytes,
        )

    async def _prepare(self, sandbox: Sandbox, task: Task, scratch: str) -> None:
        """Checks required tools, copies ``files/``, runs ``setup.sh``."""
        if task.config.requires:
            tools = " ".join(shlex.quote(t) for t in task.config.requires)
            check = f'for t in {tools}; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done'
            missing = (await sandbox.exec(check, timeout_s=30)).stdout.split()
            if missing:
                raise SandboxStartError(
                    f"task {task.task_id!r} needs {', '.join(missing)}, missing in the {self.backend.name} "
                    "sandbox: install them on the host (local backend) or use --env-arg sandbox=docker"
                )
        if task.files_dir.is_dir():
            for path in sorted(task.files_dir.rglob("*")):
                if path.is_file():
                    mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
                    await sandbox.put_file(path.relative_to(task.files_dir).as_posix(), path.read_bytes(), mode)
        setup = task.setup_script
        if setup is not None:
            script = f"{scratch}/setup-{uuid.uuid4().hex}.sh"
            await sandbox.put_file(script, setup.encode(), 0o700)
            run = await sandbox.exec(f"bash {script}; rc=$?; rm -f {script}; exit $rc", timeout_s=task.config.setup_timeout_s)
            if not run.ok:
                raise TaskError(
                    f"setup.sh of task {task.task_id!r} failed (exit {run.exit_code}, timed out: {run.timed_out}): "
                    f"{(run.stdout + run.stderr)[-1500:]}"
                )

    async def _finish(
        self, ep: _Episode, why: str, info: dict[str, Any], *, truncated: bool
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        started = time.monotonic()
        try:
            report: GradeReport = await grade(ep.sandbox, ep.task, ep.scratch_dir)
        finally:
            ep.done = True
            await ep.sandbox.close()
        n_passed = sum(t.status is TestStatus.passed for t in report.tests)
        obs = prompts.ending_observation(why, report.reward, n_passed, len(report.tests), report.error)
        info.update(grading=report.as_info(), agent_time_s=round(ep.agent_time_s, 3),
                    sandbox=self.backend.name, isolated=ep.sandbox.isolated)
        info["grading"]["duration_s"] = round(time.monotonic() - started, 3)
        return obs, report.reward, not truncated, truncated, info

