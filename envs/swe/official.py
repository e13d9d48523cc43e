"""The official harness's verdict: swebench 4.1.0's ``get_eval_report`` on a test log, as
``run_evaluation`` grades it (its parsers, their test-id mapping such as pylint's
``test_stdin[/testbed/tests/mymodule.py-...]`` -> ``test_stdin[/mymodule.py]``, and its skip
rule). Used by the ``official`` grading mode and by ``--compare``.

Repositories swebench's tables do not know (the fixtures) are added to its parser and spec maps
from gymfleet's spec table for the duration of each grading, so that its own code grades them too.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.grading import Grade, TestsStatus
from gymfleet.envs.swe.instances import SWEInstance
from gymfleet.envs.swe.specs import RepoSpec


def swebench_report(instance: SWEInstance, model_patch: str | None, model_name: str, log: Path,
                    spec: RepoSpec) -> dict[str, Any]:
    """swebench 4.1.0's ``get_eval_report`` body (``resolved``, ``tests_status``,
    ``patch_successfully_applied`` ...) for the saved log at ``log``."""
    test_spec = SimpleNamespace(instance_id=instance.instance_id, repo=instance.repo,
                                version=instance.version, FAIL_TO_PASS=instance.FAIL_TO_PASS,
                                PASS_TO_PASS=instance.PASS_TO_PASS)
    pred = {"instance_id": instance.instance_id, "model_patch": model_patch,
            "model_name_or_path": model_name}
    with registered(spec):
        report = upstream.grading().get_eval_report(test_spec, pred, str(log), True)
    return dict(report[instance.instance_id])


def official_grade(instance: SWEInstance, model_patch: str | None, log_text: str,
                   spec: RepoSpec) -> Grade:
    """The log graded as the official harness grades it, as a :class:`Grade` (``graded`` False
    when swebench finds no test output or a failure marker)."""
    with tempfile.TemporaryDirectory(prefix="gymfleet-official-") as folder:
        log = Path(folder) / "test_output.txt"
        log.write_text(log_text)
        report = swebench_report(instance, model_patch, "official", log, spec)
    empty: dict[str, list[str]] = {"success": [], "failure": []}
    status = report.get("tests_status") or {}
    tests = TestsStatus(**{k: status.get(k, dict(empty)) for k in (
        "FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL")})
    graded = bool(report.get("patch_successfully_applied"))
    resolution = upstream.grading().get_resolution_status(status) if status else "RESOLVED_NO"
    return Grade(graded, bool(report.get("resolved")), resolution, tests, {},
                 error=None if graded else "swebench found no test output between its markers")


@contextmanager
def registered(spec: RepoSpec) -> Iterator[None]:
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
