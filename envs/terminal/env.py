"""TerminalEnv: Terminal-Bench-style tasks solved with bash in a sandbox, graded by hidden tests."""

from __future__ import annotations

import shlex
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeAlias

from pydantic import field_validator

from gymfleet.envs.actions import bash_block
from gymfleet.envs.errors import SandboxStartError, TaskError
from gymfleet.envs.info import add_volatile
from gymfleet.envs.resources import Catalogue, EnvResources
from gymfleet.envs.sandbox.base import Sandbox, SandboxBackend, SandboxSpec
from gymfleet.envs.sandbox.bulk import put_files
from gymfleet.envs.sandbox_env import Graded, SandboxEnv, SandboxEnvConfig, SandboxEpisode
from gymfleet.envs.task_files import folder_files
import gymfleet.envs.terminal.prompts as prompts
from gymfleet.envs.terminal.actions import FORMAT_HELP
from gymfleet.envs.terminal.grader import TestStatus, grade
from gymfleet.envs.terminal.shell import PersistentShell, scratch_dir
from gymfleet.envs.terminal.task import BUILTIN_TASKS_DIR, Task, load_tasks


class TerminalTasks(Catalogue[tuple[str, tuple[str, ...]], dict[str, Task]]):
    """Parsed task folders by (resolved ``tasks_dir``, chosen ids), once per process
    (``resources.get(TerminalTasks)``)."""


@dataclass
class TerminalState:
    """What a terminal episode keeps besides its sandbox.

    Attributes:
        scratch: the folder of the env's own files in the sandbox (tests copied in to grade).
        shell: the persistent shell the agent's commands run in.
        agent_time_s: seconds of command time used so far (against ``agent_timeout_s``).
    """

    scratch: str
    shell: PersistentShell
    agent_time_s: float = 0.0


Episode: TypeAlias = SandboxEpisode[Task, TerminalState]


class TerminalEnvConfig(SandboxEnvConfig):
    """Arguments of :class:`TerminalEnv` (strings from ``--env-arg`` are coerced)."""

    tasks_dir: Path = BUILTIN_TASKS_DIR
    """Folder of task folders; the built-in tasks by default."""
    task_ids: list[str] | None = None
    """Only these tasks (a list, or one comma-separated string); all by default."""
    max_output_bytes: int = 16 * 1024
    """Per stream, bytes of a command's output the agent sees (head and tail)."""
    image_prefix: str = "gymfleet/"
    """Docker image of a task when not built here: ``<image_prefix><task image>:latest``."""
    prompt: Literal["full", "brief"] = "full"
    """The system prompt: ``full`` (the shell's rules: persistent state, time limits, background
    servers, how to submit) or ``brief`` (one bash block, for one-command tasks; the easy tier's)."""
    build_images: bool = True
    """On Docker, build a task's image from ``images/<image>`` when missing (content-hash tag)."""

    @field_validator("task_ids", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return [t.strip() for t in value.split(",") if t.strip()] if isinstance(value, str) else value


class TerminalEnv(SandboxEnv[Task, TerminalState]):
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
    The last ``info["grading"]`` has each test's status; ``info["volatile"]`` (values that differ
    between runs, :mod:`gymfleet.envs.info`) the ``agent_time_s`` and ``grading_s`` (seconds).

    ## Episode end
    Terminated when the agent submits. Truncated after ``max_agent_turns`` turns or when the
    agent's commands have used ``agent_timeout_s`` seconds; the end state is graded anyway, as
    Terminal-Bench does after an agent timeout. The sandbox is released once graded.

    ## Arguments
    See :class:`TerminalEnvConfig`; ``sandbox`` may also be a ``SandboxBackend`` object, and
    ``resources`` the run's shared :class:`~gymfleet.envs.resources.EnvResources`.

    ## Version history
    * v0: initial version (13 built-in tasks); on :class:`SandboxEnv` (warm pooled sandboxes
      under shared resources).
    """

    config_class = TerminalEnvConfig
    config: TerminalEnvConfig
    format_help: ClassVar[str] = FORMAT_HELP

    def __init__(self, sandbox: str | SandboxBackend = "auto", resources: EnvResources | None = None,
                 **kwargs: Any) -> None:
        super().__init__(sandbox, resources, **kwargs)
        cfg = self.config
        key = (str(Path(cfg.tasks_dir).resolve()), tuple(cfg.task_ids or ()))
        load = lambda: load_tasks(Path(cfg.tasks_dir), cfg.task_ids)  # noqa: E731
        self.tasks: dict[str, Task] = resources.get(TerminalTasks).load(key, load) if resources else load()

    @property
    def system_prompt(self) -> str:
        return prompts.SYSTEM_PROMPTS[self.config.prompt]

    def instances(self) -> dict[str, Task]:
        return self.tasks

    def gold_actions(self, instance: Task) -> list[str]:
        return [bash_block(instance.solution_script), "submit"]

    def max_turns(self, ep: Episode) -> int:
        """The task's ``max_agent_turns`` (the caller's lower limit applies: :meth:`turn_limit`)."""
        return ep.instance.config.max_agent_turns

    async def sandbox_spec(self, instance: Task, backend: str) -> SandboxSpec:
        name = instance.config.image
        if backend == "docker" and self.config.build_images:
            image = await self.image(name, backend)
        else:
            image = f"{self.config.image_prefix}{name}:latest"
        return SandboxSpec(image=image, network=instance.config.network,
                           max_output_bytes=self.config.max_output_bytes)

    async def prepare(self, ep: Episode) -> tuple[str, dict[str, Any]]:
        task, sandbox = ep.instance, ep.sandbox
        scratch = scratch_dir(sandbox)
        await self._prepare(sandbox, task, scratch, ep.lease.backend)
        ep.state = TerminalState(scratch, PersistentShell(sandbox, scratch))
        info = {"difficulty": task.config.difficulty, "category": task.config.category,
                "max_turns": self.turn_limit(ep)}
        return prompts.first_observation(task, self.turn_limit(ep)), info

    async def command(self, ep: Episode, script: str, info: dict[str, Any]) -> str:
        cfg = ep.instance.config
        budget_s = cfg.agent_timeout_s - ep.state.agent_time_s
        result = await ep.state.shell.run(script, timeout_s=min(cfg.timeout_s, budget_s))
        ep.state.agent_time_s += result.duration_s
        info.update(exit_code=result.exit_code, timed_out=result.timed_out)
        return prompts.command_observation(result, ep.turn, self.turn_limit(ep))

    def malformed(self, ep: Episode, reason: str) -> str:
        return prompts.malformed_observation(reason, ep.turn, self.turn_limit(ep))

    def over_budget(self, ep: Episode) -> str | None:
        limit_s = ep.instance.config.agent_timeout_s
        return f"Command time budget ({limit_s:g} s) used up." if ep.state.agent_time_s >= limit_s else None

    async def grade(self, ep: Episode, why: str) -> Graded:
        started = time.monotonic()
        report = await grade(ep.sandbox, ep.instance, ep.state.scratch)
        n_passed = sum(t.status is TestStatus.passed for t in report.tests)
        obs = prompts.ending_observation(why, report.reward, n_passed, len(report.tests), report.error)
        info: dict[str, Any] = {"grading": report.as_info(), "sandbox": ep.lease.backend,
                                "isolated": ep.sandbox.isolated}
        info["grading"].pop("duration_s", None)  # wall times go under info["volatile"]
        add_volatile(info, agent_time_s=round(ep.state.agent_time_s, 3),
                     grading_s=round(time.monotonic() - started, 3))
        return Graded(report.reward, obs, info)

    async def _prepare(self, sandbox: Sandbox, task: Task, scratch: str, backend: str) -> None:
        """Checks required tools, copies ``files/``, runs ``setup.sh``."""
        if task.config.requires:
            tools = " ".join(shlex.quote(t) for t in task.config.requires)
            check = f'for t in {tools}; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done'
            missing = (await sandbox.exec(check, timeout_s=30)).stdout.split()
            if missing:
                raise SandboxStartError(
                    f"task {task.task_id!r} needs {', '.join(missing)}, missing in the {backend} "
                    "sandbox: install them on the host (local backend) or use --env-arg sandbox=docker"
                )
        if task.files_dir.is_dir():
            await put_files(sandbox, folder_files(task.files_dir, task.path))
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
