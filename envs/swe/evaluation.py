"""SWE-bench evaluation: grade every prediction of a dataset, concurrently and resumably.

``gymfleet eval swebench`` is a thin command line over :func:`evaluate`. Each instance runs in
its own fresh sandbox (:class:`~gymfleet.envs.swe.harness.SWEHarness`); images are shared by
instances of one repo and version; at most ``max_workers`` instances run at once. Instances a
previous run with the same ``run_id`` finished are skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from gymfleet.core.strict import StrictModel
from gymfleet.envs.sandbox import SandboxLabels
from gymfleet.envs.swe.harness import InstanceResult, SWEHarness, SWEHarnessConfig
from gymfleet.envs.swe.instances import FIXTURES_NAME, SAFE_ID, SWEInstance, load_instances
from gymfleet.envs.swe.predictions import Prediction, check_known, load_predictions
from gymfleet.envs.swe.report import RunLayout, SWERunReport, write_instance

OnResult = Callable[[str, str, float], None]
"""Called as ``on_result(instance_id, outcome, seconds)`` when an instance is done (progress
display); outcome is ``resolved``, ``unresolved``, ``empty``, ``error`` or ``skipped``; seconds
is the instance's own grading time (0 when it was not graded in this run)."""


class EvalConfig(StrictModel):
    """One evaluation run (the options of ``gymfleet eval swebench``)."""

    dataset: str = FIXTURES_NAME
    """``fixtures``, a .json/.jsonl/.parquet file, or a dataset name (needs the hub)."""
    split: str = "test"
    """Split, for dataset names."""
    predictions: str = "gold"
    """A predictions JSONL file, ``gold`` (the instances' own patches) or ``empty``."""
    instance_ids: list[str] = Field(default_factory=list)
    """Evaluate only these."""
    max_workers: int = Field(default=4, ge=1)
    """Instances graded at once."""
    run_id: str = Field(default="gymfleet", pattern=f"^{SAFE_ID.pattern}$")
    """Names the run (one path component: letters, digits, ``_.@+-``); a second run with the
    same id skips finished instances."""
    output_dir: Path = Path(".")
    """Where ``logs/run_evaluation/...`` and the summary JSON go."""
    run_empty_patches: bool = False
    """Run the tests for empty patches too (their tests_status then shows the instance's
    FAIL_TO_PASS tests failing); off by default, as in swebench: an empty patch goes to
    ``empty_patch_ids`` before anything is provisioned. Never counted as resolved."""
    harness: SWEHarnessConfig = Field(default_factory=SWEHarnessConfig)
    """Provisioning, sandbox and grading settings."""


async def evaluate(config: EvalConfig, on_result: OnResult | None = None,
                   harness: SWEHarness | None = None) -> tuple[SWERunReport, RunLayout]:
    """Grades every prediction; writes per-instance files and the summary.

    Returns:
        The run summary (also written to ``<output>/<model>.<run_id>.json``) and the layout.

    Raises:
        InstanceLoadError: the dataset or predictions cannot be read, or a prediction names an
            instance the dataset lacks (without ``instance_ids``).
    """
    instances = load_instances(config.dataset, config.instance_ids, config.split)
    predictions = load_predictions(config.predictions, instances)
    model = next(iter(predictions.values())).model_name_or_path if predictions else "none"
    layout = RunLayout(config.output_dir, config.run_id, model)
    summary = SWERunReport(total_instances=len(instances), submitted_ids=[])
    if not config.instance_ids:
        check_known(predictions, instances)
    # swebench's incomplete_ids: instances of the dataset that got no prediction
    summary.incomplete_ids += [i.instance_id for i in instances if i.instance_id not in predictions]
    harness = harness or SWEHarness(config.harness)
    gate = asyncio.Semaphore(config.max_workers)
    notify = on_result or (lambda _id, _outcome, _s: None)

    async def one(instance: SWEInstance, prediction: Prediction) -> None:
        summary.submitted_ids.append(instance.instance_id)
        finished = layout.finished_report(instance.instance_id)
        if finished is not None:
            summary.skipped_ids.append(instance.instance_id)
            summary.add(instance.instance_id, finished, prediction.is_empty)
            notify(instance.instance_id, "skipped", 0.0)
            return
        if prediction.is_empty and not config.run_empty_patches:
            summary.add(instance.instance_id, {}, True)  # before anything is provisioned
            notify(instance.instance_id, "empty", 0.0)
            return
        async with gate:
            result = await _grade(harness, config, instance, prediction)
        write_instance(layout, result)
        summary.add(instance.instance_id, result.report()[instance.instance_id],
                    prediction.is_empty, result.error)
        notify(instance.instance_id, _outcome(result, prediction),
               result.timings_s.get("total", 0.0))

    async with asyncio.TaskGroup() as group:
        for instance in instances:
            if instance.instance_id in predictions:
                group.create_task(one(instance, predictions[instance.instance_id]))
    summary.write(layout)
    return summary, layout


async def _grade(harness: SWEHarness, config: EvalConfig, instance: SWEInstance,
                 prediction: Prediction) -> InstanceResult:
    labels = SandboxLabels(run_id=f"swe-eval-{config.run_id}")
    result = await harness.grade(instance, prediction.model_patch,
                                 prediction.model_name_or_path, labels)
    if prediction.is_empty:
        result.resolved = False  # swebench never counts an empty patch as resolved
    return result


def _outcome(result: InstanceResult, prediction: Prediction) -> str:
    if result.error is not None:
        return "error"
    if prediction.is_empty:
        return "empty"
    return "resolved" if result.resolved else "unresolved"

