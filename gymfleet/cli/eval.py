"""`gymfleet eval swebench`: SWE-bench evaluation of predictions, with progress and a report;
`gymfleet eval heldout` (:mod:`gymfleet.cli.heldout`): a training config's held-out evaluation."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gymfleet.envs.swe.errors import SWEError
from gymfleet.envs.swe.evaluation import EvalConfig, evaluate
from gymfleet.envs.swe.compare import compare_run
from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig
from gymfleet.envs.swe.report import RunLayout
from gymfleet.envs.swe.specs import DRIFT_SPECS
from gymfleet.envs.swe.instances import FIXTURE_MIRROR, load_instances
from gymfleet.envs.swe.predictions import check_known, load_predictions
from gymfleet.cli.heldout import heldout_command

eval_app = typer.Typer(no_args_is_help=True, help="Evaluate predictions on benchmarks, or policies on held-out instances.")
eval_app.command("heldout")(heldout_command)


@eval_app.command("swebench")
def swebench(
    dataset: Annotated[str, typer.Option(help="fixtures, a .json/.jsonl/.parquet file, or a dataset name.")] = "fixtures",
    predictions: Annotated[str, typer.Option(help="Predictions JSONL, `gold` or `empty`.")] = "gold",
    instance_ids: Annotated[list[str] | None, typer.Option("--instance-ids", help="Only these (repeat, or comma-separated).")] = None,
    max_workers: Annotated[int, typer.Option(min=1, help="Instances graded at once.")] = 4,
    run_id: Annotated[str, typer.Option(help="Run name; rerunning it skips finished instances.")] = "gymfleet",
    repo_mirror: Annotated[list[Path] | None, typer.Option(help="Mirror directory of git repositories (repeatable).")] = None,
    output_dir: Annotated[Path, typer.Option(help="Where logs/run_evaluation and the summary go.")] = Path("."),
    timeout: Annotated[float, typer.Option(help="Time limit of one test run, seconds.")] = 1800.0,
    spec_table: Annotated[list[Path] | None, typer.Option(help="Extra spec table YAML (repeatable).")] = None,
    no_clone: Annotated[bool, typer.Option("--no-clone", help="Never clone from GitHub.")] = False,
    split: Annotated[str, typer.Option(help="Split, for dataset names.")] = "test",
    python_fallback: Annotated[str, typer.Option(help="`nearest`: run a spec whose Python is not reachable offline on the nearest newer one (recorded in report.json); `none`: refuse it.")] = "none",
    run_empty_patches: Annotated[bool, typer.Option("--run-empty-patches", help="Run the tests of empty patches too (never resolved).")] = False,
    cpus: Annotated[float, typer.Option(help="CPU limit per sandbox, cores (0: none).")] = 0.0,
    memory_mb: Annotated[int, typer.Option(help="Memory limit per sandbox, MiB.")] = 8192,
    no_drift: Annotated[bool, typer.Option("--no-drift", help="Do not load envs/swe/fixtures/drift.yaml (pins of drifted packages, on by default).")] = False,
    compare: Annotated[Path | None, typer.Option(help="Run nothing: for the finished run (same --run-id) under this output dir, what the official harness would have applied and how its get_eval_report grades each log; lists every instance that differs, with the reason.")] = None,
    hardened: Annotated[bool, typer.Option("--hardened", help="Hardened grading (the default of gymfleet/SWE-v0): steering files of the patch dropped, every status of a test, pytest's JUnit report, the canary. Default: the official harness's apply commands, whole patch and verdict.")] = False,
) -> None:
    """Grades predictions on SWE-bench-format instances in Docker; writes SWE-bench's report."""
    ids = [i for item in (instance_ids or []) for i in item.split(",") if i]
    mirrors = [*(repo_mirror or []), FIXTURE_MIRROR]
    console = Console(stderr=True)
    tables = [*(spec_table or []), *([] if no_drift else [DRIFT_SPECS])]
    try:
        harness = SWEHarnessConfig(grading="hardened" if hardened else "official",
                                   repo_mirrors=mirrors, allow_clone=not no_clone,
                                   spec_tables=tables, eval_timeout_s=timeout,
                                   cpus=cpus, memory_mb=memory_mb,
                                   images={"python_fallback": python_fallback})
        config = EvalConfig(
            dataset=dataset, split=split, predictions=predictions, instance_ids=ids,
            max_workers=max_workers, run_id=run_id, output_dir=output_dir,
            run_empty_patches=run_empty_patches, harness=harness)
    except ValidationError as exc:
        first = exc.errors()[0]
        console.print(f"[red]error:[/red] {escape(str(first['loc'][-1]))}: {escape(first['msg'])}")
        raise typer.Exit(2) from exc
    try:
        instances = load_instances(dataset, ids, split)
        with_prediction = load_predictions(predictions, instances)  # bad predictions fail before the bar
        if not ids:
            check_known(with_prediction, instances)
        if compare is not None:
            _compare(config, compare, instances, with_prediction, console)
            return
        total = sum(i.instance_id in with_prediction for i in instances)
        # a run started in the background inherits SIGINT ignored: take it back, so ^C / kill
        # -INT stops the run (asyncio cancels the instances; their sandboxes are closed)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        summary, layout = asyncio.run(_run(config, total, console))
    except SWEError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    except KeyboardInterrupt as exc:
        console.print("interrupted: finished instances are kept; rerun the same command to go on")
        raise typer.Exit(130) from exc
    data = summary.as_dict()
    console.print(
        f"resolved {data['resolved_instances']}, unresolved {data['unresolved_instances']}, "
        f"empty {data['empty_patch_instances']}, errors {data['error_instances']} "
        f"(of {data['submitted_instances']} submitted; {len(summary.skipped_ids)} finished before)"
    )
    for instance_id, error in data["errors"].items():
        console.print(f"  [yellow]{escape(instance_id)}[/yellow]: "
                      f"{escape(error.splitlines()[0][:200] if error else '')}")
    console.print(f"report: {layout.summary_path}  logs: {layout.run_dir}")
    typer.echo(json.dumps({k: data[k] for k in ("resolved_ids", "unresolved_ids", "error_ids",
                                                "empty_patch_ids")}))


async def _run(config: EvalConfig, total: int, console: Console):  # type: ignore[no-untyped-def]
    counts = {"resolved": 0, "unresolved": 0, "empty": 0, "error": 0, "skipped": 0}
    columns = (TextColumn("[bold]swebench[/bold] {task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    start = time.monotonic()
    # piped or redirected: no live bar (it would print nothing until the end), one line each
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("", total=total)
        if not console.is_terminal:
            console.print(f"grading {total} instances (run {config.run_id}); a line as each "
                          "finishes", highlight=False)

        def on_result(instance_id: str, outcome: str, seconds: float) -> None:
            counts[outcome] += 1
            progress.update(task, advance=1, description=" ".join(
                f"{k} {v}" for k, v in counts.items() if v))
            if not console.is_terminal:
                done = sum(counts.values())
                console.print(f"[{done}/{total}] {instance_id}: {outcome} ({seconds:.0f} s; "
                              f"{time.monotonic() - start:.0f} s into the run)",
                              highlight=False, markup=False)

        return await evaluate(config, on_result)


def _compare(config: EvalConfig, report_dir: Path, instances: list, predictions: dict,  # type: ignore[type-arg]
             console: Console) -> None:
    """``--compare``: swebench's verdicts on the saved logs against gymfleet's."""
    harness = SWEHarness(config.harness)
    model = next(iter(predictions.values())).model_name_or_path if predictions else "none"
    layout = RunLayout(report_dir, config.run_id, model)
    specs = {i.instance_id: harness.spec(i) for i in instances if i.instance_id in predictions}
    result = compare_run(layout, [i for i in instances if i.instance_id in specs],
                         predictions, specs)
    for diff in result.differences:
        console.print(f"{diff.instance_id}: gymfleet {diff.gymfleet}, swebench {diff.swebench}",
                      highlight=False, markup=False)
        for reason in diff.reasons:  # test ids hold any text, `[/mymodule.py]` included
            console.print(f"  - {reason}", highlight=False, markup=False)
    console.print(f"compared {result.compared}: {result.agree} agree, "
                  f"{len(result.differences)} differ, {len(result.not_run)} without a log",
                  highlight=False, markup=False)
    typer.echo(json.dumps(result.as_dict()))
