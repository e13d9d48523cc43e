"""HarborEnv: Harbor (Terminal-Bench 2.x) and Terminal-Bench 1 task folders, built and graded offline."""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self, TypeAlias

from pydantic import Field, field_validator

from gymfleet.envs.actions import bash_block
from gymfleet.envs.errors import TaskError
from gymfleet.envs.resources import Catalogue, EnvResources, SharedResource
from gymfleet.envs.sandbox.base import SandboxBackend, SandboxSpec
from gymfleet.envs.sandbox_env import Graded, SandboxEnv, SandboxEnvConfig, SandboxEpisode
from gymfleet.envs.task_files import folder_files, read_bytes
from gymfleet.envs.terminal import prompts
from gymfleet.envs.terminal.actions import FORMAT_HELP
from gymfleet.envs.terminal.shell import PersistentShell
from gymfleet.envs.harbor.build import HarborImageBuilder, TaskImage
from gymfleet.envs.harbor.dockerfile import entrypoint_command
from gymfleet.envs.harbor.grader import run_verifier
from gymfleet.envs.harbor.task import HarborTask, NoSolutionError, TaskSet, load_task_set

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"
"""Two tiny tasks written here (one per layout): the family's default, for `gymfleet envs check`."""
SOLUTION_DIR = "/solution"
NO_INTERNET_NOTE = "the task allows internet; gymfleet sandboxes run without network"
"""``info['network_note']`` when the task asked for network (``info['allow_internet']`` is the bool)."""


STOPPED_NOTE = ("{n} process(es) left running were stopped before the tests (Harbor leaves them up): if the "
                "tests probe a service the solution starts, list the task in keep_processes")
"""``info['grading']['stopped_note']``: said when processes were stopped and the reward is below 1."""


class HarborTasks(Catalogue[tuple[str, tuple[str, ...]], TaskSet]):
    """Parsed Harbor task folders by (path, chosen ids), once per process (``resources.get(HarborTasks)``)."""


class HarborBuilder(SharedResource):
    """The process's one :class:`HarborImageBuilder` (it keeps no per-task state)."""

    def __init__(self) -> None:
        self.builder = HarborImageBuilder()

    @classmethod
    def create(cls, resources: EnvResources) -> Self:
        return cls()


@dataclass
class HarborState:
    """What a Harbor episode keeps besides its sandbox.

    Attributes:
        shell: the persistent shell the agent's commands run in.
        agent_time_s: seconds of command time used so far (against the task's agent timeout).
    """

    shell: PersistentShell
    agent_time_s: float = 0.0


Episode: TypeAlias = SandboxEpisode[HarborTask, HarborState]


class HarborEnvConfig(SandboxEnvConfig):
    """Arguments of :class:`HarborEnv` (strings from ``--env-arg`` are coerced)."""

    path: str = str(EXAMPLES_DIR)
    """A task folder, a folder of task folders, or a glob of either (Harbor or TB1 layout);
    the two examples shipped with the family by default."""
    task_ids: list[str] | None = None
    """Only these tasks (a list, or one comma-separated string); all by default."""
    max_agent_turns: int = Field(default=50, ge=1)
    """Agent turns before the episode is truncated (the verifier still grades)."""
    command_timeout_s: float = Field(default=600.0, gt=0)
    """Seconds one agent command may run (also bounded by what is left of the agent timeout)."""
    max_output_bytes: int = 16 * 1024
    """Per stream, bytes of a command's output the agent sees (head and tail)."""
    pids_limit: int = Field(default=1024, ge=16)
    """Processes alive at once in the sandbox."""
    keep_processes: list[str] = Field(default_factory=list)
    """Task ids (or globs, ``fnmatch``) whose verifier runs beside the processes the agent left
    running, for tests that probe a service the agent started. Trades isolation for
    compatibility: such a process can rewrite the reward file while the tests run. Every other
    task's verifier starts after they are killed. Empty by default."""

    @field_validator("task_ids", "keep_processes", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return [t.strip() for t in value.split(",") if t.strip()] if isinstance(value, str) else value


class HarborEnv(SandboxEnv[HarborTask, HarborState]):
    """Community task folders (Harbor's ``task.toml`` layout or Terminal-Bench 1's ``task.yaml``).

    ## Description
    Each instance is a task folder under ``path``; its image is built here from its Dockerfile
    (public base images substituted by debootstrap-built Debian ones, see
    :mod:`gymfleet.envs.harbor.dockerfile`), one fresh container per episode. See docs/harbor.md.

    ## Observation
    Text. First ``instruction.md`` (TB1: ``instruction``) with the limits; after each command
    its exit code, stdout and stderr (head and tail when long); after a malformed turn, the format.

    ## Action
    As Terminal-v0: one fenced ```` ```bash ```` block run in a persistent shell (cwd, exports,
    functions survive), or ``submit`` to finish. ``noop_action`` is ``"submit"``.

    ## Reward
    0 on every step but the last; on the last, the verifier's reward: the agent's processes are
    killed (unless the task is in ``keep_processes``), ``tests/`` is copied to ``/tests`` only
    after the agent is done, where none of its changes reaches the verifier's tools (a fresh
    container of the image holding the rest when needed; ``docs/sandbox.md``), ``test.sh`` runs
    under the verifier timeout, whatever it started is killed, and the
    reward is ``/logs/verifier/reward.txt``, else ``reward.json``'s ``reward`` (other keys in
    ``info["grading"]["extra"]``; outside [0, 1] kept, flagged ``reward_out_of_range``); TB1: 1
    when every pytest test listed on stdout passed and ``run-tests.sh`` exited 0. A missing or
    unreadable reward, or a verifier timeout, is reward 0 with ``info["grading_error"]`` set.

    ## Episode end
    Terminated on ``submit``. Truncated after ``max_agent_turns`` turns (or the caller's lower
    ``max_turns``: :meth:`turn_limit`) or when the agent's
    commands have used the task's agent timeout; graded either way, as Harbor does.

    ## Arguments
    See :class:`HarborEnvConfig`.

    ## Version history
    * v0: initial version (Harbor and TB1 layouts, offline builds, staged verifier fetches);
      the verifier isolated from the agent's processes and tools (``keep_processes``); every
      Python import folder counted as the verifier's tools; ``reward.txt`` read before
      ``reward.json``; TB1 graded on stdout, worst status and ``run-tests.sh``'s exit code;
      ``task.toml`` read with Harbor's schema (unknown keys warned, ``[environment.env]``
      applied); an image's entrypoint started as Harbor starts it, for the agent and the tests;
      only start-up and configuration files withheld from the verifier.
    """

    config_class = HarborEnvConfig
    config: HarborEnvConfig
    requires: ClassVar[frozenset[str]] = frozenset({"sandbox", "docker"})
    format_help: ClassVar[str] = FORMAT_HELP
    fresh_sandbox: ClassVar[bool] = True  # the task's files live in the image; a pool reset would wipe them

    def __init__(self, sandbox: str | SandboxBackend = "auto", resources: EnvResources | None = None,
                 **kwargs: Any) -> None:
        super().__init__(sandbox, resources, **kwargs)
        cfg = self.config
        key = (str(cfg.path), tuple(cfg.task_ids or ()))
        load = lambda: load_task_set(cfg.path, cfg.task_ids)  # noqa: E731
        self.task_set: TaskSet = resources.get(HarborTasks).load(key, load) if resources else load()
        self.tasks: dict[str, HarborTask] = self.task_set.tasks
        self._builder = resources.get(HarborBuilder).builder if resources else HarborImageBuilder()
        self._images: dict[str, TaskImage] = {}

    @property
    def system_prompt(self) -> str:
        return prompts.SYSTEM_PROMPT

    def instances(self) -> dict[str, HarborTask]:
        return self.tasks

    def instance(self, instance_id: str) -> HarborTask:
        """The task ``instance_id``.

        Raises:
            TaskError: it was skipped as malformed when the folder was read (the message says why).
            KeyError: no such task (the message lists the known ones).
        """
        if instance_id in self.task_set.skipped:
            raise TaskError(f"task {instance_id!r} was skipped as invalid: {self.task_set.skipped[instance_id]}")
        return super().instance(instance_id)

    def gold_actions(self, instance: HarborTask) -> list[str]:
        """Copies ``solution/`` (TB1: ``solution.sh``) to ``/solution`` and runs it, as Harbor's
        oracle agent does; then submits.

        Raises:
            NoSolutionError: the task has no solution.
        """
        script = instance.solution_script
        if script is None:
            raise NoSolutionError(f"task {instance.name!r} has no solution (solution/solve.sh or solution.sh)")
        files = (folder_files(script.parent, instance.path) if instance.layout == "harbor"
                 else {script.name: (read_bytes(instance.path, script), 0o755)})  # no link out of the task
        lines = [f"export {k}={shlex.quote(v)}" for k, v in instance.solution_env.items() if k.isidentifier()]
        lines.append(f"mkdir -p {SOLUTION_DIR}")
        for name, (content, _) in files.items():
            target = f"{SOLUTION_DIR}/{name}"
            data = base64.b64encode(content).decode()
            lines.append(f"mkdir -p {shlex.quote(str(Path(target).parent))} && echo {data} | base64 -d > {shlex.quote(target)}")
        lines.append(f"bash {SOLUTION_DIR}/{script.name}")
        return [bash_block("\n".join(lines)), "submit"]

    def max_turns(self, ep: Episode) -> int:
        return self.config.max_agent_turns

    async def task_image(self, instance: HarborTask) -> TaskImage:
        """The task's image, built once per env (a content-hash tag when cached).

        Raises:
            UnbuildableError: the task cannot be built here (one-line reason).
        """
        if instance.name not in self._images:
            self._images[instance.name] = await asyncio.to_thread(self._builder.ensure, instance)
        return self._images[instance.name]

    async def sandbox_spec(self, instance: HarborTask, backend: str) -> SandboxSpec:
        image = await self.task_image(instance)
        return SandboxSpec(image=image.tag, workdir=instance.workdir or image.workdir, network=False, env=instance.env,
                           cpus=instance.cpus, memory_mb=instance.memory_mb, disk_mb=instance.storage_mb,
                           pids_limit=self.config.pids_limit, max_output_bytes=self.config.max_output_bytes)

    async def prepare(self, ep: Episode) -> tuple[str, dict[str, Any]]:
        task = ep.instance
        image = self._images[task.name]
        if image.entrypoint:  # as Harbor starts the container: the entrypoint's services up for the agent
            await ep.sandbox.exec(entrypoint_command(image.entrypoint), timeout_s=60)
        ep.state = HarborState(PersistentShell(ep.sandbox, "/tmp/.gymfleet"))
        info: dict[str, Any] = {"layout": task.layout, "image": image.tag, "base_substitution": image.base_substitution,
                                "max_turns": self.turn_limit(ep), "network": False,
                                "allow_internet": task.allow_internet}
        if task.allow_internet:
            info["network_note"] = NO_INTERNET_NOTE
        if image.entrypoint:
            info["entrypoint"] = image.entrypoint
        if task.notes or task.unknown_keys:
            info["task_toml"] = {"notes": task.notes, "unknown_keys": task.unknown_keys}
        observation = (f"Task: {task.name}\n\n{task.instruction.strip()}\n\n"
                       f"(You have {self.turn_limit(ep)} turns and {task.agent_timeout_s:g} s of command time. "
                       "There is no network.)")
        return observation, info

    async def command(self, ep: Episode, script: str, info: dict[str, Any]) -> str:
        budget_s = ep.instance.agent_timeout_s - ep.state.agent_time_s
        result = await ep.state.shell.run(script, timeout_s=min(self.config.command_timeout_s, budget_s))
        ep.state.agent_time_s += result.duration_s
        info.update(exit_code=result.exit_code, timed_out=result.timed_out)
        return prompts.command_observation(result, ep.turn, self.turn_limit(ep))

    def malformed(self, ep: Episode, reason: str) -> str:
        return prompts.malformed_observation(reason, ep.turn, self.turn_limit(ep))

    def over_budget(self, ep: Episode) -> str | None:
        limit_s = ep.instance.agent_timeout_s
        return f"Agent timeout ({limit_s:g} s) used up." if ep.state.agent_time_s >= limit_s else None

    async def grade(self, ep: Episode, why: str) -> Graded:
        keep = any(fnmatch.fnmatchcase(ep.instance.name, glob) for glob in self.config.keep_processes)
        entrypoint = self._images[ep.instance.name].entrypoint
        report = await run_verifier(ep.sandbox, ep.instance, ep.sandbox.spec.workdir, keep_processes=keep,
                                    entrypoint=entrypoint)
        outcome = f"grading error: {report.error}" if report.error else f"verifier reward {report.reward:g}"
        info: dict[str, Any] = {"grading": report.as_info(), "agent_time_s": round(ep.state.agent_time_s, 3)}
        if report.error:
            info["grading_error"] = report.error
        if report.stopped_processes and report.reward < 1 and not keep:
            info["grading"]["stopped_note"] = STOPPED_NOTE.format(n=len(report.stopped_processes))
        return Graded(report.reward, f"{why} Reward {report.reward:g} ({outcome}).", info)
