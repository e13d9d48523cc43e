"""``gymfleet/SWE-v0``: fix a real repository's issue with a bash shell, graded by its tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from gymfleet.envs.actions import Malformed, Word, parse_fenced_action
from gymfleet.envs.base import AgentEnv, Policy, ScriptedPolicy
from gymfleet.envs.sandbox import Sandbox, SandboxBackend, SandboxLabels
from gymfleet.envs.swe import patch as scripts
from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig
from gymfleet.envs.swe.instances import FIXTURES_NAME, SWEInstance, load_instances

SUBMIT = "submit"
FORMAT_HELP = f"Reply with exactly one ```bash block, or `{SUBMIT}` alone to finish."
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


class SWEEnvConfig(BaseModel):
    """Arguments of ``gymfleet/SWE-v0`` (``gymnasium.make(..., **kwargs)``)."""

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


class SWEEnv(AgentEnv):
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
    fresh sandbox from the same image: apply the diff (test files the agent touched are
    excluded), apply the test patch, run the tests with a time limit, parse them with swebench.

    ## Episode end
    Terminated on ``submit``. Truncated by the registry's step limit (50 turns), with reward 0.

    ## Info
    ``instance_id``, ``image``; on the last step ``patch`` (the diff graded), ``report``
    (swebench's per-instance report: per-test detail in ``tests_status``) and ``error``.

    ## Arguments
    See :class:`SWEEnvConfig` (``dataset``, ``instance_ids``, ``repo_mirror``,
    ``command_timeout_s``, ``eval_timeout_s``, ``harness``).

    ## Version history
    * v0: initial version.
    """

    noop_action: ClassVar[str] = f"```bash\n{SUBMIT}\n```"

    def __init__(self, backend: SandboxBackend | None = None, **kwargs: Any) -> None:
        """Args: ``backend``: a sandbox backend to share between envs (one thread pool, one
        orphan sweep); made from ``harness.sandbox_backend`` when None. ``kwargs``: the fields
        of :class:`SWEEnvConfig`."""
        super().__init__()
        self.config = SWEEnvConfig(**kwargs)
        harness = self.config.harness.model_copy()
        if self.config.repo_mirror is not None:
            harness.repo_mirrors = [self.config.repo_mirror, *harness.repo_mirrors]
        self.harness = SWEHarness(harness, backend)
        self._instances = {i.instance_id: i for i in
                           load_instances(self.config.dataset, self.config.instance_ids)}
        self._instance: SWEInstance | None = None
        self._sandbox: Sandbox | None = None
        self._image = ""

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def instance_ids(self) -> list[str]:
        return list(self._instances)

    async def reset_async(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        await self._close_sandbox()
        ids = self.instance_ids()
        wanted = (options or {}).get("instance_id")
        if wanted is None:
            wanted = ids[(seed or 0) % len(ids)]
        if wanted not in self._instances:  # KeyError for an unknown id, as documented
            raise KeyError(f"unknown SWE instance {wanted!r}; known: {', '.join(ids)}")
        instance = self._instances[wanted]
        image = await self.harness.provision(instance)
        sandbox = self.harness.sandbox(image, SandboxLabels(run_id="swe-env"))
        await sandbox.start()
        self._sandbox, self._instance, self._image = sandbox, instance, image.tag
        try:
            await self.harness.reset_repo(sandbox, instance, image)
        except Exception:
            await self._close_sandbox()
            raise
        # The instructions are the system prompt (callers send it as the system message); the
        # first observation is the issue alone, so that a rollout does not carry them twice.
        observation = f"<issue>\n{instance.problem_statement.strip()}\n</issue>"
        return observation, {"instance_id": instance.instance_id, "image": image.tag}

    async def step_async(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._sandbox is None or self._instance is None:
            raise RuntimeError("call reset() before step()")
        info: dict[str, Any] = {"instance_id": self._instance.instance_id, "image": self._image}
        parsed = parse_fenced_action(action, (SUBMIT,), FORMAT_HELP)
        if isinstance(parsed, Malformed):
            return parsed.reason, 0.0, False, False, info
        if isinstance(parsed, Word):
            return await self._submit(info)
        result = await self._sandbox.exec(parsed.script, timeout_s=self.config.command_timeout_s)
        head = (f"timed out after {self.config.command_timeout_s:g} s (killed)"
                if result.timed_out else f"exit code {result.exit_code}")
        return _clip(f"{head}\n{result.stdout}{result.stderr}"), 0.0, False, False, info

    async def _submit(self, info: dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self._sandbox is not None and self._instance is not None
        instance = self._instance
        diff = await self._agent_diff(self._sandbox, instance)
        await self._close_sandbox()
        result = await self.harness.grade(instance, diff, "agent",
                                          SandboxLabels(run_id="swe-env-grade"))
        reward = 1.0 if result.resolved else 0.0
        info.update(patch=diff, report=result.report(), error=result.error)
        status = result.grade.resolution if result.grade else f"error: {result.error}"
        return f"Submitted. Grading: {status}; reward {reward:g}.", reward, True, False, info

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

    async def end_async(self, reason: str) -> tuple[float, dict[str, Any]]:
        """Submits the diff as it stands (the caller's turn limit came first), as SWE-agent's
        autosubmission does."""
        if self._sandbox is None or self._instance is None:
            return 0.0, {}
        info: dict[str, Any] = {"instance_id": self._instance.instance_id, "image": self._image,
                                "ended_by_caller": reason}
        _, reward, _, _, info = await self._submit(info)
        return reward, info

    async def close_async(self) -> None:
        await self._close_sandbox()

    async def _close_sandbox(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            await sandbox.close()

    def gold_policy(self) -> Policy:
        if self._instance is None:
            raise RuntimeError("call reset() before gold_policy(): the gold patch is per instance")
        gold = self._instance.patch
        delimiter = "GYMFLEET_GOLD_PATCH"
        while delimiter in gold:
            delimiter += "_"
        body = gold if gold.endswith("\n") else gold + "\n"
        apply = (f"```bash\ncat > /tmp/gold.diff <<'{delimiter}'\n{body}{delimiter}\n"
                 "git apply /tmp/gold.diff && rm /tmp/gold.diff\n```")
        return ScriptedPolicy([apply, self.noop_action])


def _clip(text: str) -> str:
    if len(text) <= _MAX_OBSERVATION_CHARS:
        return text
    half = _MAX_OBSERVATION_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"
