"""`gymfleet adapters export vN DIR`: one published adapter version as a plain PEFT folder (and,
with ``--push REPO``, on a model hub)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from gymfleet.cli.runs import RunsDirOpt, _fail

adapters_app = typer.Typer(no_args_is_help=True, help="Published adapter versions: export one, push it to a hub.")

_VERSION = re.compile(r"^v?(\d+)$")


@adapters_app.command("export")
def export_command(
    version: Annotated[str, typer.Argument(help="The version: v3, 3 or v000003.")],
    dest: Annotated[Path, typer.Argument(help="A new (or empty) folder to write the PEFT adapter into.")],
    run: Annotated[str | None, typer.Option(help="Run id; default: the only run in --runs-dir (or --bucket).")] = None,
    bucket: Annotated[str | None, typer.Option(
        help="The run's bucket: the `bucket:` of its training config (an fsspec URL; {run_id} is filled in); "
             "default RUNS_DIR/RUN_ID/bucket.")] = None,
    runs_dir: RunsDirOpt = Path("runs"),
    push: Annotated[str | None, typer.Option(help="Also upload the folder to this hub repo (user/name).")] = None,
) -> None:
    """Copies a version (checked against its manifest) into DIR as a plain PEFT folder: adapter_config.json
    naming the base model's hub id, the weights, and a model card (README.md) with the run's held-out
    gains when its report has them. Load it with PeftModel.from_pretrained(base, DIR)."""
    from gymfleet.trainer import AdapterBucket, export_version

    match = _VERSION.match(version)
    if not match or int(match.group(1)) < 1:
        _fail(f"version {version!r}: write it as vN (N >= 1), e.g. v3; `ls` the run's bucket for the versions")
    url = bucket or str(runs_dir / "{run_id}" / "bucket")
    run_id = run or _only_run(runs_dir, bucket)
    folder = export_version(AdapterBucket(url.replace("{run_id}", run_id), run_id), int(match.group(1)), dest,
                            _heldout(runs_dir / run_id / "report" / "report.json"))
    print(f"exported v{int(match.group(1))} of run {run_id} to {folder}")
    if push:
        print(f"pushed to {_push(folder, push)}")


def _only_run(runs_dir: Path, bucket: str | None) -> str:
    if bucket:
        root = Path(bucket)
        found = sorted(p.name for p in root.glob("*") if (p / "adapters").is_dir()) if root.is_dir() else []
        where = f"the bucket {bucket}"
    else:
        found = sorted(p.parent.name for p in runs_dir.glob("*/bucket") if p.is_dir())
        where = f"{runs_dir} (--runs-dir or GYMFLEET_RUNS_DIR)"
    if len(found) != 1:
        _fail(f"{where} holds {len(found)} runs with adapters ({', '.join(found) or 'none'}): pass --run RUN_ID")
    return found[0]


def _heldout(report: Path) -> dict[str, Any] | None:
    try:
        evaluation = json.loads(report.read_text()).get("evaluation")
    except (OSError, ValueError, AttributeError):
        return None
    return evaluation if isinstance(evaluation, dict) else None


def _push(folder: Path, repo_id: str) -> str:
    """Uploads ``folder`` with huggingface_hub; no hub reachable (or no token) is one line, exit 2."""
    from huggingface_hub import HfApi

    try:
        api = HfApi()
        api.create_repo(repo_id, repo_type="model", exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                          commit_message=f"gymfleet adapter {folder.name}")
    except Exception as exc:  # noqa: BLE001 - its HTTP client's errors (httpx or httpx2, by version), its own, OSError
        reason = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        _fail(f"could not push {folder} to the hub repo {repo_id}: {reason}; the export stays in {folder} "
              "(log in with `hf auth login`, or upload it from a machine that reaches the hub)")
    return f"https://huggingface.co/{repo_id}"
