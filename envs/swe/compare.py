"""Parity check, end to end: for each instance of a finished run, what the official harness
would have applied and how its ``get_eval_report`` grades that log, against gymfleet's verdict.

``gymfleet eval swebench ... --compare REPORT_DIR`` reads a finished run under ``REPORT_DIR``
(``logs/run_evaluation/<run_id>/<model>/<id>/test_output.txt``, ``report.json``) and lists every
instance where the two differ, with the reason:

* a different patch: a ``--hardened`` run dropped files (``dropped_files``) that the official
  harness applies; its log is not the official one, so this is a difference whatever the
  verdicts (rerun without ``--hardened`` for the official number);
* a different verdict on the same log: gymfleet's error, a run it could not grade
  (``ungradable``: no JUnit report, a crash, the canary, an install that changed start-up hooks
  or the grader's tools), or the tests whose outcome differs with the status swebench's parser
  gave each (last line wins; 4.1.0 counts a SKIPPED/XFAIL FAIL_TO_PASS test as passed).

An instance where both sides error (image build, apply, eval setup, timeout: swebench's
``run_instance`` raises on each) agrees. Empty-patch runs (``--run-empty-patches``) are compared
like any other (never resolved on either side).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.instances import SWEInstance
from gymfleet.envs.swe.official import swebench_report
from gymfleet.envs.swe.predictions import Prediction
from gymfleet.envs.swe.report import RunLayout
from gymfleet.envs.swe.specs import RepoSpec

_GROUPS = ("FAIL_TO_PASS", "PASS_TO_PASS")


@dataclass
class Difference:
    """One instance whose verdicts differ.

    Attributes:
        gymfleet: ``resolved``, ``unresolved`` or ``error``.
        swebench: ``resolved``, ``unresolved``, ``error``, or ``not graded`` (gymfleet graded a
            different patch than the official harness applies).
        reasons: why, one line each.
    """

    instance_id: str
    gymfleet: str
    swebench: str
    reasons: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    """The parity check of one run."""

    compared: int = 0
    agree: int = 0
    not_run: list[str] = field(default_factory=list)
    """Instances with a prediction but no log under the report dir."""
    differences: list[Difference] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON written beside the run's summary."""
        return asdict(self)


def compare_run(layout: RunLayout, instances: list[SWEInstance],
                predictions: dict[str, Prediction], specs: dict[str, RepoSpec]) -> Comparison:
    """Grades every instance's saved log with swebench and compares it with gymfleet's verdict.

    Args:
        layout: the finished run (its output dir, run id and model).
        instances: the dataset's instances.
        predictions: by instance id.
        specs: each instance's spec (for repositories swebench's tables lack).
    """
    result = Comparison()
    for instance in instances:
        prediction = predictions.get(instance.instance_id)
        folder = layout.instance_dir(instance.instance_id)
        log = folder / "test_output.txt"
        if prediction is None:
            continue
        if not log.is_file():
            if not prediction.is_empty:  # an empty patch not run: swebench runs none either
                result.not_run.append(instance.instance_id)
            continue
        result.compared += 1
        difference = compare_instance(instance, prediction, folder, specs[instance.instance_id])
        if difference is None:
            result.agree += 1
        else:
            result.differences.append(difference)
    return result


def compare_instance(instance: SWEInstance, prediction: Prediction, folder: Path,
                     spec: RepoSpec) -> Difference | None:
    """The difference on one instance, or None when both say the same."""
    ours = _our_report(folder, instance.instance_id)
    our_verdict = ("error" if ours is None else "resolved" if ours.get("resolved")
                   else "unresolved")
    if ours is not None and ours.get("dropped_files"):
        return Difference(instance.instance_id, our_verdict, "not graded", [
            f"gymfleet graded a different patch: --hardened dropped "
            f"{', '.join(ours['dropped_files'])}, which the official harness applies (rerun "
            "without --hardened for its verdict)"])
    log_text = (folder / "test_output.txt").read_text(errors="replace")
    if ours is not None and upstream.constants().START_TEST_OUTPUT not in log_text:
        return Difference(instance.instance_id, our_verdict, "not graded", [
            f"gymfleet stopped before the tests ({ours.get('ungradable') or 'no test run'}); "
            "the official harness would have run them"])
    theirs = swebench_report(instance, prediction.model_patch, prediction.model_name_or_path,
                             folder / "test_output.txt", spec)
    their_verdict = _their_verdict(theirs, folder / "test_output.txt", prediction)
    if our_verdict == their_verdict:
        return None
    return Difference(instance.instance_id, our_verdict, their_verdict,
                      _reasons(instance, folder, ours, theirs, spec))


def _their_verdict(theirs: dict[str, Any], log: Path, prediction: Prediction) -> str:
    """What swebench's ``run_instance`` reports: an error when the patch did not apply, the
    tests timed out or never ran (the image build or eval setup failed), else its report's
    ``resolved`` (never for an empty patch)."""
    c = upstream.constants()
    text = log.read_text(errors="replace")
    if (c.APPLY_PATCH_FAIL in text or c.TESTS_TIMEOUT in text
            or c.START_TEST_OUTPUT not in text):
        return "error"
    return "resolved" if theirs.get("resolved") and not prediction.is_empty else "unresolved"


def _our_report(folder: Path, instance_id: str) -> dict[str, Any] | None:
    path = folder / "report.json"
    if not path.is_file():
        return None
    return dict(json.loads(path.read_text())[instance_id])


def _reasons(instance: SWEInstance, folder: Path, ours: dict[str, Any] | None,
             theirs: dict[str, Any], spec: RepoSpec) -> list[str]:
    if ours is None:
        error = next((line for line in (folder / "run_instance.log").read_text().splitlines()
                      if line.startswith("error:")), "error: (no run_instance.log)")
        return [f"gymfleet {error[:300]}"]
    reasons = []
    if not theirs.get("patch_successfully_applied"):
        reasons.append("swebench: no test output between the markers, or a failure marker")
    if ours.get("ungradable"):
        reasons.append(f"gymfleet ungradable: {ours['ungradable']}")
    if ours.get("dropped_files"):
        reasons.append(f"gymfleet did not grade {', '.join(ours['dropped_files'])}")
    reasons += _test_reasons(instance, folder, ours, theirs, spec)
    return reasons or ["same per-test outcomes; the resolution rule differs"]


def _test_reasons(instance: SWEInstance, folder: Path, ours: dict[str, Any],
                  theirs: dict[str, Any], spec: RepoSpec) -> list[str]:
    """One line per test whose success differs, with swebench's parsed status."""
    if "tests_status" not in theirs or "tests_status" not in ours:
        return []
    log = (folder / "test_output.txt").read_text(errors="replace")
    c = upstream.constants()
    section = log.split(c.START_TEST_OUTPUT, 1)[-1].split(c.END_TEST_OUTPUT, 1)[0]
    statuses = spec.parser()(section, SimpleNamespace(instance_id=instance.instance_id))
    lines = []
    for group in _GROUPS:
        mine = set(ours["tests_status"][group]["success"])
        for test in theirs["tests_status"][group]["success"]:
            if test not in mine:
                lines.append(f"{group} {test}: swebench counts its status "
                             f"{statuses.get(test, 'missing')} as success; gymfleet failure "
                             "(another report of it failing, not PASSED, or not in pytest's "
                             "JUnit report)")
        for test in mine - set(theirs["tests_status"][group]["success"]):
            lines.append(f"{group} {test}: gymfleet success; swebench status "
                         f"{statuses.get(test, 'missing')}")
    return lines[:20]
