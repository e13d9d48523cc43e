"""Runs one instance in a sandbox: provision its image, apply a patch, run swebench's eval
script with a time limit, and grade the run. Shared by ``gymfleet/SWE-v0`` and the evaluation.

The eval script runs as two sandbox commands: its setup (test files reset, test patch applied,
install re-run), then the test command alone. The grader takes the test command's output and
exit status from that second command's exec, which the harness reads from Docker, so nothing the
code under test prints or writes can pose as the harness's markers or exit code; the markers in
``test_output.txt`` are written by the harness around that output.

Every failure of one instance (no image, patch does not apply, tests time out, sandbox error)
becomes that instance's :class:`InstanceResult` with ``error`` set; nothing here raises for a bad
instance or patch.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import time
from types import SimpleNamespace
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field

from gymfleet.core.strict import StrictModel
from gymfleet.core.errors import SandboxError
from gymfleet.envs.resources import EnvResources, SharedResource
from gymfleet.envs.sandbox import Sandbox, SandboxBackend, SandboxLabels, SandboxSpec, get_backend
from gymfleet.envs.swe import patch as scripts
from gymfleet.envs.swe import guard, services, upstream
from gymfleet.envs.swe.canary import Canary, canary_candidates, plant_canary, restore_command
from gymfleet.envs.swe.errors import ImageBuildFailedError, SWEError, SWESetupError
from gymfleet.envs.swe.graded_patch import graded_patch
from gymfleet.envs.swe.grading import TEST_EXIT_CODE, Grade, grade_output, ungraded
from gymfleet.envs.swe.hooks import new_hooks, parse_snapshot
from gymfleet.envs.swe.hooks import snapshot_script as hook_snapshot_script
from gymfleet.envs.swe.image_scripts import WHEELHOUSE
from gymfleet.envs.swe.images import ImageProvider, ImageRef, SWEImagesConfig
from gymfleet.envs.swe.instances import FIXTURE_MIRROR, SWEInstance
from gymfleet.envs.swe.junit import JunitReports, parse_junit, runs_pytest
from gymfleet.envs.swe.official import official_grade
from gymfleet.envs.swe.repos import RepoSource
from gymfleet.envs.swe.specs import DRIFT_SPECS, RepoSpec, load_spec


GradingMode = Literal["official", "hardened"]
"""``official``: swebench 4.1.0's run (the whole patch, its apply commands in order, its
``get_eval_report`` on the log): the number a leaderboard prints. ``hardened``: the patch's
steering files dropped (:mod:`~gymfleet.envs.swe.graded_patch`), every status of a test, the
JUnit report and the canary (:mod:`~gymfleet.envs.swe.grading`): for training, where a policy is
an adversary. Both check that the install left the grader's tools and test files alone
(:mod:`~gymfleet.envs.swe.guard`)."""


class SWEHarnessConfig(StrictModel):
    """How SWE instances are provisioned, run and graded."""

    grading: GradingMode = "hardened"
    """How a patch is applied and its log graded (see :data:`GradingMode`); ``gymfleet eval
    swebench`` uses ``official`` unless ``--hardened``."""

    repo_mirrors: list[Path] = Field(default_factory=lambda: [FIXTURE_MIRROR])
    """Mirror directories of git repositories, searched before GitHub."""
    allow_clone: bool = True
    """Clone from GitHub when no mirror has the repository."""
    spec_tables: list[Path] = Field(default_factory=lambda: [DRIFT_SPECS])
    """Spec tables (YAML, shaped like ``fixtures/specs.yaml``) looked up before swebench's;
    by default ``fixtures/drift.yaml`` (pins of drifted packages, shown as ``spec_overrides``
    in report.json)."""
    sandbox_backend: str = "docker"
    """Sandbox backend name (``docker``; the images need it)."""
    eval_timeout_s: float = 1800.0
    """Time limit of one test run, seconds (swebench's default)."""
    setup_timeout_s: float = 300.0
    """Time limit of resetting the repo or applying a patch, seconds."""
    service_start_timeout_s: float = 60.0
    """Bound on the wait for the spec's services (a local httpbin) to listen, seconds."""
    cpus: float = 0.0
    """CPU limit per sandbox, cores; 0 means none (a one-CPU container makes some repos skip
    pass-to-pass tests, so the default does not limit)."""
    memory_mb: int = 8192
    """Memory limit per sandbox, MiB (enough for the heaviest spec the sweep ran)."""
    max_output_mb: int = 64
    """Most output kept of one command (the test run's log), MiB."""
    images: SWEImagesConfig = Field(default_factory=SWEImagesConfig)
    """Image finding and building."""


@dataclass
class InstanceResult:
    """The outcome of grading one patch on one instance.

    Attributes:
        error: why the instance could not be graded (no image, patch did not apply, tests
            timed out, sandbox failure), else None.
        grade: the grading, when the tests ran and their log was gradable.
        test_log: the patch application and test run output.
    """

    instance_id: str
    model_name_or_path: str
    model_patch: str | None
    resolved: bool = False
    error: str | None = None
    grade: Grade | None = None
    test_log: str = ""
    image: str = ""
    timings_s: dict[str, float] = field(default_factory=dict)
    python_fallback: str | None = None
    """``"3.8->3.9"`` when the instance ran on another Python than its spec's."""
    translated: tuple[str, ...] = ()
    """What of a conda spec was translated to pip."""
    build_log: str = ""
    """The image build log (whole), when this run built or failed to build an image."""
    dropped_files: tuple[str, ...] = ()
    """Files of the model patch not graded (:mod:`gymfleet.envs.swe.graded_patch`)."""
    spec_overrides: dict[str, Any] = field(default_factory=dict)
    """Fields a spec table (``drift.yaml`` by default) changed in swebench's spec, and where."""
    services: tuple[str, ...] = ()
    """Local services started for the tests (``httpbin``: httpbin.org resolved to it)."""
    grading: str = "hardened"
    """The :data:`GradingMode` that graded it (``grading`` in report.json)."""

    @property
    def patch_applied(self) -> bool:
        """True when the patch applied (an empty patch counts as applied)."""
        return upstream.constants().APPLY_PATCH_FAIL not in self.test_log and bool(self.test_log)

    def report(self) -> dict[str, Any]:
        """The per-instance ``report.json`` in swebench's layout (plus ``error``)."""
        body: dict[str, Any] = {
            "patch_is_None": self.model_patch is None,
            "patch_exists": self.model_patch is not None,
            "patch_successfully_applied": self.grade is not None or (
                self.patch_applied and self.error is None),
            "resolved": self.resolved,
            "error": self.error,
            "grading": self.grading,
        }
        if self.python_fallback:
            body["python_fallback"] = self.python_fallback
        if self.dropped_files:
            body["dropped_files"] = list(self.dropped_files)
        if self.spec_overrides:
            body["spec_overrides"] = self.spec_overrides
        if self.services:
            body["services"] = list(self.services)
        if self.translated:
            body["conda_translated"] = list(self.translated)
        if self.grade is not None:
            body["tests_status"] = self.grade.tests_status.as_dict()
            body["resolution"] = self.grade.resolution
            if self.grade.junk_ids:
                body["junk_ids"] = list(self.grade.junk_ids)
            if not self.grade.graded:
                body["ungradable"] = self.grade.error
        return {self.instance_id: body}


class SWEHarness:
    """Provisions and grades instances; one per env or evaluation run (caches specs, images)."""

    def __init__(self, config: SWEHarnessConfig | None = None,
                 backend: SandboxBackend | None = None) -> None:
        self.config = config or SWEHarnessConfig()
        self.images = ImageProvider(
            RepoSource(tuple(self.config.repo_mirrors), self.config.allow_clone), self.config.images
        )
        self._backend = backend

    def backend(self) -> SandboxBackend:
        """The sandbox backend (made on first use)."""
        if self._backend is None:
            self._backend = get_backend(self.config.sandbox_backend)
        return self._backend

    def spec(self, instance: SWEInstance) -> RepoSpec:
        """The instance's spec (raises SpecNotFoundError)."""
        return load_spec(instance.repo, instance.version, self.config.spec_tables)

    async def provision(self, instance: SWEInstance) -> ImageRef:
        """The instance's image, found, pulled or built (in a thread; raises ProvisionError)."""
        return await asyncio.to_thread(self.images.ensure, instance, self.spec(instance))

    def sandbox(self, image: ImageRef, labels: SandboxLabels | None = None,
                net_admin: bool = False) -> Sandbox:
        """A new sandbox (not started) of ``image`` with the repo at ``/testbed``; ``net_admin``
        (grading only, for services that route addresses) grants CAP_NET_ADMIN in its own
        network namespace, which still has no network."""
        spec = SandboxSpec(image=image.tag, workdir=scripts.REPO_DIR, network=False,
                           net_admin=net_admin,
                           cpus=self.config.cpus, memory_mb=self.config.memory_mb,
                           pids_limit=4096, ttl_s=self.config.eval_timeout_s + 3600,
                           max_output_bytes=self.config.max_output_mb * 1024 * 1024,
                           env=_pip_env(image))
        return self.backend().create(spec, labels)

    async def reset_repo(self, sandbox: Sandbox, instance: SWEInstance, image: ImageRef) -> None:
        """Puts the sandbox's repo at the instance's start. Both image layouts already are there
        (gymfleet's instance images are built at the base commit with the future pruned;
        official ones likewise), so this only checks the repository is present.

        Raises:
            SWESetupError: /testbed is not a git repository.
        """
        result = await sandbox.exec("git rev-parse --verify -q HEAD", timeout_s=60)
        if not result.ok:
            raise SWESetupError(f"{image.tag} has no git repository at {scripts.REPO_DIR}: "
                                f"{(result.stdout + result.stderr).strip()[-400:]}")

    async def grade(self, instance: SWEInstance, model_patch: str | None, model_name: str = "gold",
                    labels: SandboxLabels | None = None) -> InstanceResult:
        """Grades ``model_patch`` on ``instance`` in a fresh sandbox. Never raises for a bad
        instance or patch: the result's ``error`` says what went wrong."""
        result = InstanceResult(instance.instance_id, model_name, model_patch,
                                grading=self.config.grading)
        start = time.monotonic()
        try:
            spec = self.spec(instance)
            if spec.overrides:
                result.spec_overrides = {"table": spec.source, "fields": spec.overrides}
            image = await self.provision(instance)
            result.image, result.build_log = image.tag, image.build_log
            result.python_fallback, result.translated = image.python_fallback, image.translated
            result.timings_s["image"] = image.seconds
            net_admin = services.needs_net_admin(services.resolve(spec.services))
            async with self.sandbox(image, labels, net_admin) as sandbox:
                await self._apply_and_test(sandbox, instance, image, model_patch or "", result)
        except ImageBuildFailedError as exc:
            result.error, result.build_log = f"{type(exc).__name__}: {exc}", exc.build_log
        except (SWEError, SandboxError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        result.timings_s["total"] = time.monotonic() - start
        return result

    async def _apply_and_test(self, sandbox: Sandbox, instance: SWEInstance, image: ImageRef,
                              model_patch: str, result: InstanceResult) -> None:
        t0 = time.monotonic()
        if not await self._apply(sandbox, instance, model_patch, result):
            return
        result.timings_s["apply"] = time.monotonic() - t0
        # nothing of the prediction has run yet (git applied it): the guard's moment
        t_guard = time.monotonic()
        snapshot = await guard.take_snapshot(sandbox, instance, scripts.REPO_DIR)
        result.timings_s["guard"] = time.monotonic() - t_guard
        spec = self.spec(instance)
        conda = image.layout == "swebench"
        hooks_before = await self._hooks(sandbox, conda)
        await sandbox.put_file(scripts.EVAL_SCRIPT_PATH,
                               scripts.eval_setup_script(instance, spec, conda).encode(), mode=0o755)
        setup = await sandbox.exec(f"bash {scripts.EVAL_SCRIPT_PATH} 2>&1",
                                   timeout_s=self.config.setup_timeout_s)
        result.test_log += setup.stdout + setup.stderr
        if not setup.ok:
            why = "timed out" if setup.timed_out else f"exit code {setup.exit_code}"
            what = (f"the post-patch install `{spec.install}` failed (offline: its build "
                    f"requirements must be in {WHEELHOUSE})"
                    if setup.exit_code == scripts.INSTALL_FAILED_EXIT and not setup.timed_out
                    else f"the eval setup (test patch, install) failed ({why})")
            result.error = f"{what}: {_tail(setup.stdout + setup.stderr)}"
            return
        t_guard = time.monotonic()
        tampered = await guard.changed_since(sandbox, snapshot, scripts.REPO_DIR)
        result.timings_s["guard"] += time.monotonic() - t_guard
        if tampered:
            why = ("the install changed the grader's tools or the test patch's files: "
                   + ", ".join(tampered[:5]))
            result.test_log += f"\n>>>>> gymfleet: {why}\n"
            result.grade = ungraded(instance.FAIL_TO_PASS, instance.PASS_TO_PASS, why)
            return
        added = new_hooks(hooks_before, await self._hooks(sandbox, conda))
        if added:
            why = "the install changed interpreter start-up hooks: " + "; ".join(added)
            result.test_log += f"\n>>>>> gymfleet: {why}\n"
            result.grade = ungraded(instance.FAIL_TO_PASS, instance.PASS_TO_PASS, why)
            return
        if spec.services and not await self._start_services(sandbox, spec, result):
            return
        await self._run_tests(sandbox, instance, spec, conda, result)

    async def _apply(self, sandbox: Sandbox, instance: SWEInstance, model_patch: str,
                     result: InstanceResult) -> bool:
        """Applies the patch as the grading mode says: ``official``, the whole patch with
        swebench's commands in order (no reset between them); ``hardened``, the blocks
        :func:`graded_patch` keeps, then a check that the apply wrote no file those blocks do not
        name. False (with ``result.error`` or an ungraded ``result.grade``) when it must stop."""
        hardened = self.config.grading == "hardened"
        names: frozenset[str] = frozenset()
        text = model_patch
        if hardened:
            graded = graded_patch(model_patch, set(upstream.modified_files(instance.test_patch))
                                  | set(upstream.new_files(instance.test_patch)))
            result.dropped_files, text, names = graded.dropped, _with_newline(graded.patch), graded.names
        if not text.strip():
            return True
        await sandbox.put_file(scripts.PATCH_PATH, text.encode())
        script = scripts.apply_script() if hardened else scripts.official_apply_script()
        applied = await sandbox.exec(script, timeout_s=self.config.setup_timeout_s)
        result.test_log = applied.stdout + applied.stderr
        if not applied.ok:
            result.error = "patch did not apply: " + scripts.apply_failure(result.test_log)
            return False
        if not hardened:
            return True
        listed = await sandbox.exec(scripts.written_files_command(), timeout_s=120)
        stray = [p for p in scripts.parse_written_files(listed.stdout) if p not in names
                 and not p.endswith((".orig", ".rej"))]
        if stray or not listed.ok:
            why = ("the patch's apply wrote " + ", ".join(stray[:5]) + ", which no block of the "
                   "patch names" if stray else "cannot list what the patch's apply wrote")
            result.test_log += f"\n>>>>> gymfleet: {why}\n"
            result.grade = ungraded(instance.FAIL_TO_PASS, instance.PASS_TO_PASS, why)
            return False
        return True

    async def _start_services(self, sandbox: Sandbox, spec: RepoSpec,
                              result: InstanceResult) -> bool:
        """Starts the spec's services in the grading sandbox (:mod:`~gymfleet.envs.swe.services`)
        and waits until they listen; on failure sets ``result.error`` (quoting the server's log)
        and returns False."""
        wanted = services.resolve(spec.services)
        result.services = tuple(s.name for s in wanted)
        timeout_s = self.config.service_start_timeout_s
        run = await sandbox.exec(services.start_script(wanted, timeout_s), timeout_s=timeout_s + 30)
        result.test_log += run.stdout + run.stderr
        if not run.ok:
            result.error = (f"local service(s) {', '.join(result.services)} did not start: "
                            f"{_tail(run.stdout + run.stderr)}")
        return run.ok

    async def _hooks(self, sandbox: Sandbox, conda: bool) -> dict[str, str]:
        """The site directories' start-up hooks (:mod:`gymfleet.envs.swe.hooks`).

        Raises:
            SWESetupError: the snapshot printed nothing (no Python in the sandbox).
        """
        script = scripts.python_script(hook_snapshot_script(), conda)
        run = await sandbox.exec(script, timeout_s=120)
        found = parse_snapshot(run.stdout)
        if found is None:
            raise SWESetupError("cannot list the sandbox's site directories: "
                                f"{_tail(run.stdout + run.stderr, 300)}")
        return found

    async def _run_tests(self, sandbox: Sandbox, instance: SWEInstance, spec: RepoSpec,
                         conda: bool, result: InstanceResult) -> None:
        """Runs the test command as its own exec and grades what that exec returned (with
        pytest's JUnit report when the command is pytest, and the grader's canary when its
        runner has one: :mod:`~gymfleet.envs.swe.canary`, planted only now, after the agent,
        and taken out after the run); the markers and exit code in ``test_log`` are written
        here, around its output."""
        t1 = time.monotonic()
        hardened = self.config.grading == "hardened"
        junit_path = (f"/tmp/gymfleet-results-{secrets.token_hex(8)}/junit.xml"
                      if hardened and runs_pytest(spec.test_cmd) else None)
        canary = await self._plant_canary(sandbox, instance, spec) if hardened else None
        run = await sandbox.exec(scripts.test_run_script(instance, spec, conda, junit_path, canary),
                                 timeout_s=self.config.eval_timeout_s)
        result.timings_s["tests"] = time.monotonic() - t1
        if canary is not None:
            if canary.original is not None:
                await _overwrite(sandbox, f"{scripts.REPO_DIR}/{canary.path}", canary.original)
            await sandbox.exec(restore_command(canary, scripts.REPO_DIR), timeout_s=60)
        c = upstream.constants()
        output = run.stdout + run.stderr
        result.test_log += (f"+ : '{c.START_TEST_OUTPUT}'\n{output}\n+ : '{c.END_TEST_OUTPUT}'\n"
                            f"{TEST_EXIT_CODE}: {run.exit_code}\n")
        if canary is not None:  # its planted failures are expected: say so to the log's reader
            result.test_log += canary.log_note()
        if run.timed_out:
            result.test_log += (f"\n{c.TESTS_TIMEOUT}: "
                                f"{self.config.eval_timeout_s:g} seconds exceeded\n")
            result.error = f"tests timed out after {self.config.eval_timeout_s:g} s"
            return
        if not hardened:
            result.grade = official_grade(instance, result.model_patch, result.test_log, spec)
            result.resolved = result.grade.resolved
            return
        junit = await _read_junit(sandbox, junit_path) if junit_path else None
        grade = grade_output(output, run.exit_code, instance.FAIL_TO_PASS, instance.PASS_TO_PASS,
                             spec.parser(), SimpleNamespace(instance_id=instance.instance_id,
                                                            repo=instance.repo,
                                                            version=instance.version),
                             junit=junit, require_junit=junit_path is not None, canary=canary)
        result.grade = grade  # no results / a crash: unresolved, as swebench 4.1.0 grades it
        result.resolved = grade.resolved

    async def _plant_canary(self, sandbox: Sandbox, instance: SWEInstance,
                            spec: RepoSpec) -> Canary | None:
        """Removes the eval script and patch files (the test patch is written in the script: no
        copy of it stays for the code under test to compare the test files with), reads the
        test patch's files and plants the canary (:func:`~gymfleet.envs.swe.canary.plant_canary`):
        appended to one of them, keeping its mode and modification time, or a new file (none
        when three drawn names all exist)."""
        await sandbox.exec(f"rm -f {scripts.EVAL_SCRIPT_PATH} {scripts.PATCH_PATH}", timeout_s=60)
        sources: dict[str, bytes] = {}
        for path in canary_candidates(spec.test_cmd, instance.test_patch):
            try:
                sources[path] = await sandbox.get_file(f"{scripts.REPO_DIR}/{path}")
            except SandboxError:
                continue  # deleted by the test patch, or not a regular file
        for _ in range(3):  # a new file's name drawn again while the repository has one
            canary = plant_canary(spec.test_cmd, spec.test_directives(instance.row()),
                                  instance.FAIL_TO_PASS, sources, taken=instance.PASS_TO_PASS)
            if canary is None or canary.original is not None:
                break
            path = shlex.quote(f"{scripts.REPO_DIR}/{canary.path}")
            exists = await sandbox.exec(f"test -e {path}", timeout_s=60)
            if exists.exit_code != 0:
                break
        else:
            return None
        if canary is not None and canary.original is not None:
            await _overwrite(sandbox, f"{scripts.REPO_DIR}/{canary.path}", canary.contents)
        elif canary is not None:
            await sandbox.put_file(f"{scripts.REPO_DIR}/{canary.path}", canary.contents)
        return canary


async def _overwrite(sandbox: Sandbox, path: str, data: bytes) -> None:
    """Writes ``data`` over the file at ``path``, keeping its inode, mode and modification time.

    Raises:
        SWESetupError: the file could not be written.
    """
    staged = f"/tmp/gymfleet-{secrets.token_hex(8)}"
    await sandbox.put_file(staged, data)
    target = shlex.quote(path)
    run = await sandbox.exec(f"t=$(stat -c %y {target}) && cat {staged} > {target} && "
                             f"touch -d \"$t\" {target}; s=$?; rm -f {staged}; exit $s", timeout_s=60)
    if not run.ok:
        raise SWESetupError(f"cannot write the grader's canary into {path}: "
                            f"{_tail(run.stdout + run.stderr, 300)}")


async def _read_junit(sandbox: Sandbox, path: str) -> JunitReports | None:
    """pytest's JUnit report at ``path``, or None when it wrote none (or not JUnit XML)."""
    try:
        return parse_junit(await sandbox.get_file(path))
    except SandboxError:
        return None


def _pip_env(image: ImageRef) -> dict[str, str]:
    """pip's settings in a sandbox: no index (no network: fail fast); gymfleet's images build
    from the wheels they staged, official ones (no wheelhouse) from the conda env's own
    setuptools (no build isolation)."""
    if image.layout == "swebench":
        return {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": WHEELHOUSE}


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _tail(text: str, n_chars: int = 800) -> str:
    return text.strip()[-n_chars:]


class SWEHarnesses(SharedResource):
    """The SWE family's shared resource: one :class:`SWEHarness` (with its image cache) per
    distinct :class:`SWEHarnessConfig`, on the resources' backend (``resources.get(SWEHarnesses)``)."""

    def __init__(self, resources: EnvResources) -> None:
        self._resources = resources
        self._harnesses: dict[str, SWEHarness] = {}

    @classmethod
    def create(cls, resources: EnvResources) -> Self:
        return cls(resources)

    async def harness(self, config: SWEHarnessConfig | None = None) -> SWEHarness:
        """The harness for ``config`` (default settings when None), made at first use.

        Raises:
            SandboxUnavailableError: its backend is missing.
        """
        config = config or SWEHarnessConfig()
        key = config.model_dump_json()
        if key not in self._harnesses:
            backend = await self._resources.backend(config.sandbox_backend)
            self._harnesses.setdefault(key, SWEHarness(config, backend))
        return self._harnesses[key]
