"""``gymfleet/SWE-v0``: fix a real repository's issue with a bash shell, graded by its tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeAlias

from pydantic import Field

from gymfleet.envs.resources import Catalogue, EnvResources
from gymfleet.envs.sandbox import Sandbox, SandboxBackend, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox_env import SUBMIT, Graded, SandboxEnv, SandboxEnvConfig, SandboxEpisode
from gymfleet.envs.swe import patch as scripts
from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig, SWEHarnesses
from gymfleet.envs.swe.images import ImageRef
from gymfleet.envs.swe.instances import FIXTURES_NAME, SWEInstance, load_instances

_MAX_OBSERVATION_CHARS = 10_000

SYSTEM_PROMPT = f"""You are a software engineer fixing an issue in a Python repository.
The repository is checked out at /testbed (the current directory) in a Linux shell.
Each turn, reply with exactly one fenced block:
```bash
<one or more shell commands>
```
It runs with bash in /testbed; you get back its exit code and output. Each block runs in a new
shell: `cd` and variables do not carry over. Edit files with shell tools (sed, cat <<'EOF',
python). Do not edit the tests: they are replaced when grading.
When the fix is done, reply with a block that contains only `{SUBMIT}`. Your changes (the diff
against the original commit) are then graded by the repository's tests."""


class SWEInstances(Catalogue[tuple[str, tuple[str, ...]], dict[str, SWEInstance]]):
    """Loaded instances by (dataset, chosen ids), once per process (``resources.get(SWEInstances)``)."""


@dataclass
class SWEState:
    """What an SWE episode keeps besides its sandbox.

    Attributes:
        image: the tag of the instance's image the sandbox runs.
    """

    image: str = ""


Episode: TypeAlias = SandboxEpisode[SWEInstance, SWEState]


class SWEEnvConfig(SandboxEnvConfig):
    """Arguments of ``gymfleet/SWE-v0`` (``gymnasium.make(..., **kwargs)``)."""

    sandbox: str = "docker"
    """Sandbox backend (the instance images need Docker)."""
    dataset: str = FIXTURES_NAME
    """Instances: ``fixtures``, a .json/.jsonl/.parquet file, or a dataset name."""
    instance_ids: list[str] = Field(default_factory=list)
    """Only these instances (all when empty)."""
    repo_mirror: Path | None = None
    """A mirror directory of git repositories, searched before the fixtures' and GitHub."""
    command_timeout_s: float = 120.0
    """Time limit of one agent command, seconds."""
    eval_timeout_s: float = 900.0
    """Time limit of the grading test run, seconds."""
    harness: SWEHarnessConfig = Field(default_factory=SWEHarnessConfig)
    """Provisioning, sandbox and grading settings."""


class SWEEnv(SandboxEnv[SWEInstance, SWEState]):
    """Fix an issue in a real repository (SWE-bench task format).

    ## Description
    Each episode is one SWE-bench-format instance: a repository at its base commit in a Docker
    sandbox built from the instance's image, and the issue text. The agent explores and edits
    the repository with bash, then submits. The default instances are the five fixtures in
    ``envs/swe/fixtures`` (real fixes of semver and humanize); any SWE-bench-schema dataset works.

    ## Observation
    First: the issue text in ``<issue>`` tags (the instructions are ``system_prompt``). Then, after each command: its exit code and
    output (at most 10,000 characters, head and tail). After ``submit``: the grading summary.

    ## Action
    One fenced ```` ```bash ```` block per turn; a block holding only ``submit`` ends the
    episode. Anything else gets an observation explaining the format (no exception).

    ## Reward
    1.0 when the submitted diff resolves the instance (every FAIL_TO_PASS test passes, every
    PASS_TO_PASS test still passes), else 0.0, given on the submitting step. Grading runs in a
    fresh sandbox from the same image: apply the diff (test files, ``conftest.py``, test-run and
    packaging configuration and start-up hooks the agent touched are excluded:
    :mod:`gymfleet.envs.swe.graded_patch`), apply the test patch, run the tests with a time limit, parse them with swebench.

    ## Episode end
    Terminated on ``submit``. Truncated by the registry's step limit (50 turns), with reward 0.

    ## Info
    ``instance_id``, ``image``; on the last step ``patch`` (the diff graded), ``report``
    (swebench's per-instance report: per-test detail in ``tests_status``) and ``error``.

    ## Arguments
    See :class:`SWEEnvConfig` (``dataset``, ``instance_ids``, ``repo_mirror``,
    ``command_timeout_s``, ``eval_timeout_s``, ``harness``); ``backend`` a sandbox backend
    object to use, ``resources`` the run's :class:`~gymfleet.envs.resources.EnvResources`
    (one harness and image cache per process).

    ## Version history
    * v0: initial version; on :class:`SandboxEnv` (a fresh sandbox per episode: the task's
      state is the image, which a pool's reset would wipe).
    """

    requires: ClassVar[frozenset[str]] = frozenset({"docker"})
    noop_action: ClassVar[str] = f"```bash\n{SUBMIT}\n```"
    config_class = SWEEnvConfig
    config: SWEEnvConfig
    fresh_sandbox: ClassVar[bool] = True
    submitted_note: ClassVar[str] = "Submitted."

    def __init__(self, backend: SandboxBackend | None = None, resources: EnvResources | None = None,
                 **kwargs: Any) -> None:
        """Args: ``backend``: a sandbox backend to use (tests); ``resources``: the run's
        shared resources (one harness per process); ``kwargs``: the fields of :class:`SWEEnvConfig`."""
        sandbox = kwargs.pop("sandbox", None) or backend or SWEEnvConfig().sandbox
        super().__init__(sandbox, resources, **kwargs)
        cfg = self.config
        key = (str(cfg.dataset), tuple(cfg.instance_ids))
        load = lambda: {i.instance_id: i for i in load_instances(cfg.dataset, cfg.instance_ids)}  # noqa: E731
        self._instances: dict[str, SWEInstance] = resources.get(SWEInstances).load(key, load) if resources else load()
        self._images: dict[str, ImageRef] = {}

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def instances(self) -> dict[str, SWEInstance]:
        return self._instances

    async def harness(self) -> SWEHarness:
        """The process's harness for this env's settings (provisioning, image cache, grading)."""
        config = self.config.harness.model_copy()
        if self.config.repo_mirror is not None:
            config.repo_mirrors = [self.config.repo_mirror, *config.repo_mirrors]
        return await (await self.env_resources()).get(SWEHarnesses).harness(config)

    def step_info(self, ep: Episode) -> dict[str, Any]:
        return {"instance_id": ep.instance_id, "image": ep.state.image, "turn": ep.turn}

    async def sandbox_spec(self, instance: SWEInstance, backend: str) -> SandboxSpec:
        harness = await self.harness()
        image = self._images[instance.instance_id] = await harness.provision(instance)
        return harness.sandbox(image).spec  # the harness's limits; the sandbox object is not started

    async def prepare(self, ep: Episode) -> tuple[str, dict[str, Any]]:
        image = self._images[ep.instance_id]
        ep.state = SWEState(image.tag)
        await (await self.harness()).reset_repo(ep.sandbox, ep.instance, image)
        # The instructions are the system prompt (callers send it as the system message); the
        # first observation is the issue alone, so that a rollout does not carry them twice.
        return f"<issue>\n{ep.instance.problem_statement.strip()}\n</issue>", {"image": image.tag}

    async def command(self, ep: Episode, script: str, info: dict[str, Any]) -> str:
        timeout_s = self.config.command_timeout_s
        result = await ep.sandbox.exec(script, timeout_s=timeout_s)
        head = f"timed out after {timeout_s:g} s (killed)" if result.timed_out else f"exit code {result.exit_code}"
        return _clip(f"{head}\n{result.stdout}{result.stderr}")

    async def grade(self, ep: Episode, why: str) -> Graded:
        """Diffs the repository, releases the sandbox, grades the diff in a fresh one."""
        diff = await self._agent_diff(ep.sandbox, ep.instance)
        await ep.lease.release()
        resources = await self.env_resources()
        result = await (await self.harness()).grade(ep.instance, diff, "agent",
                                                    SandboxLabels(run_id=resources.run_id))
        reward = 1.0 if result.resolved else 0.0
        status = result.grade.resolution if result.grade else f"error: {result.error}"
        info = {"patch": diff, "report": result.report(), "error": result.error}
        return Graded(reward, f"{why} Grading: {status}; reward {reward:g}.", info)

    async def _agent_diff(self, sandbox: Sandbox, instance: SWEInstance) -> str:
        """The diff against the base commit, test files excluded."""
        listed = await sandbox.exec(scripts.changed_files_command(instance.base_commit),
                                    timeout_s=60)
        test_files = set(upstream.modified_files(instance.test_patch))
        paths = [p for p in listed.stdout.split("\0")
                 if p and not scripts.is_test_file(p, test_files)]
        if not paths:
            return ""
        diff = await sandbox.exec(scripts.diff_command(instance.base_commit, paths), timeout_s=60)
        return diff.stdout

    def gold_actions(self, instance: SWEInstance) -> list[str]:
        gold = instance.patch
        delimiter = "GYMFLEET_GOLD_PATCH"
        while delimiter in gold:
            delimiter += "_"
        body = gold if gold.endswith("\n") else gold + "\n"
        apply = (f"```bash\ncat > /tmp/gold.diff <<'{delimiter}'\n{body}{delimiter}\n"
                 "git apply /tmp/gold.diff && rm /tmp/gold.diff\n```")
        return [apply, self.noop_action]


def _clip(text: str) -> str:
    if len(text) <= _MAX_OBSERVATION_CHARS:
        return text
    half = _MAX_OBSERVATION_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"
