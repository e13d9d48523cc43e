"""Parity check: gymfleet's verdicts against swebench's own ``get_eval_report`` on the same logs.

``gymfleet eval swebench ... --compare REPORT_DIR`` reads a finished run under ``REPORT_DIR``
(``logs/run_evaluation/<run_id>/<model>/<id>/test_output.txt``, ``report.json``), grades each
``test_output.txt`` with swebench 4.1.0's ``get_eval_report``, and lists every instance where
swebench's ``resolved`` differs from gymfleet's, with the reason: gymfleet's error, a run it
could not grade (``ungradable``: no JUnit report, a crash, an install that wrote start-up hooks),
files it did not grade (``dropped_files``), or the tests whose outcome differs and the status
swebench's parser gave each (last line wins; 4.1.0 counts a SKIPPED/XFAIL FAIL_TO_PASS test as
passed).

Repositories swebench's tables do not know (the fixtures) are added to its parser and spec maps
from gymfleet's spec table for the duration of each grading, so that its own code grades them too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.instances import SWEInstance
from gymfleet.envs.swe.predictions import Prediction
from gymfleet.envs.swe.report import RunLayout
from gymfleet.envs.swe.specs import RepoSpec

_GROUPS = ("FAIL_TO_PASS", "PASS_TO_PASS")


@dataclass
class Difference:
    """One instance whose verdicts differ.

    Attributes:
        gymfleet: ``resolved``, ``unresolved`` or ``error``.
        swebench: ``resolved`` or ``unresolved``.
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
        if prediction is None or prediction.is_empty:
            continue
        if not log.is_file():
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
    theirs = swebench_report(instance, prediction, folder / "test_output.txt", spec)
    ours = _our_report(folder, instance.instance_id)
    our_verdict = ("error" if ours is None else "resolved" if ours.get("resolved")
                   else "unresolved")
    their_verdict = "resolved" if theirs.get("resolved") else "unresolved"
    if our_verdict == their_verdict:
        return None
    return Difference(instance.instance_id, our_verdict, their_verdict,
                      _reasons(instance, folder, ours, theirs, spec))


def swebench_report(instance: SWEInstance, prediction: Prediction, log: Path,
                    spec: RepoSpec) -> dict[str, Any]:
    """swebench 4.1.0's ``get_eval_report`` body for one saved log."""
    test_spec = SimpleNamespace(instance_id=instance.instance_id, repo=instance.repo,
                                version=instance.version, FAIL_TO_PASS=instance.FAIL_TO_PASS,
                                PASS_TO_PASS=instance.PASS_TO_PASS)
    pred = {"instance_id": instance.instance_id, "model_patch": prediction.model_patch,
            "model_name_or_path": prediction.model_name_or_path}
    with _registered(spec):
        report = upstream.grading().get_eval_report(test_spec, pred, str(log), True)
    return dict(report[instance.instance_id])


@contextmanager
def _registered(spec: RepoSpec) -> Iterator[None]:
    """Adds a repository swebench does not know to its parser and spec maps for the duration of
    one grading, then takes it out again (swebench's maps are process-wide: a lasting entry would
    change later spec lookups in the same process). An entry swebench has is never changed."""
    specs = upstream.constants().MAP_REPO_VERSION_TO_SPECS
    parsers = upstream.module("harness.log_parsers").MAP_REPO_TO_PARSER
    added_parser = spec.repo not in parsers
    added_repo = spec.repo not in specs
    added_version = added_repo or spec.version not in specs[spec.repo]
    if added_parser:
        parsers[spec.repo] = spec.parser()
    if added_version:
        specs.setdefault(spec.repo, {})[spec.version] = {"test_cmd": spec.test_cmd}
    try:
        yield
    finally:
        if added_parser:
            parsers.pop(spec.repo, None)
        if added_repo:
            specs.pop(spec.repo, None)
        elif added_version:
            specs[spec.repo].pop(spec.version, None)


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
