"""`gymfleet adapters list|export`: a run's published adapter versions, and one of them as a
plain PEFT folder (with ``--push REPO``, on a model hub)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from gymfleet.cli.options import VERSION_HELP, pick_version
from gymfleet.cli.runs import RunsDirOpt, _fail

adapters_app = typer.Typer(no_args_is_help=True, help="Published adapter versions: list them, export one, push it to a hub.")

RunOpt = Annotated[str | None, typer.Option(help="Run id; default: the only run in --runs-dir (or --bucket).")]
BucketOpt = Annotated[str | None, typer.Option(
    help="The run's bucket: the `bucket:` of its training config (an fsspec URL; {run_id} is filled in); "
         "default RUNS_DIR/RUN_ID/bucket.")]


def _bucket(run: str | None, bucket: str | None, runs_dir: Path) -> Any:
    from gymfleet.trainer import AdapterBucket

    run_id = run or _only_run(runs_dir, bucket)
    url = bucket or str(runs_dir / "{run_id}" / "bucket")
    return AdapterBucket(url.replace("{run_id}", run_id), run_id)


@adapters_app.command("list")
def list_command(
    run: RunOpt = None, bucket: BucketOpt = None, runs_dir: RunsDirOpt = Path("runs"),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout (nothing else).")] = False,
) -> None:
    """Lists the run's committed adapter versions: learner step, when published, the last step's mean
    reward, and how it was made (warm start or GRPO)."""
    store = _bucket(run, bucket, runs_dir)
    rows = [_row(a.version, a.meta) for a in store.committed_newest_first()][::-1]
    if as_json:
        print(json.dumps({"run_id": store.run_id, "bucket": store.root, "versions": rows}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("version", "step", "published (UTC)", "mean reward", "made by", title=f"run {store.run_id}")
    for r in rows:
        table.add_row(f"v{r['version']}", str(r["step"]), r["published_at"] or "-",
                      "-" if r["mean_reward"] is None else f"{r['mean_reward']:.3f}", r["made_by"])
    out = Console(soft_wrap=True)
    out.print(table) if rows else out.print(f"run {store.run_id}: no version published in {store.root}")


def _row(version: int, meta: dict[str, Any]) -> dict[str, Any]:
    from datetime import datetime, timezone

    t = meta.get("published_at")
    rewards = meta.get("recent_rewards") or {}
    last = rewards.get(str(meta.get("step"))) if isinstance(rewards, dict) else None
    return {"version": version, "step": meta.get("step"),
            "published_at": datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            if isinstance(t, (int, float)) else None,
            "mean_reward": last if isinstance(last, (int, float)) else None,
            "made_by": "warm start" if isinstance(meta.get("warm_start"), dict) else "GRPO"}


@adapters_app.command("export")
def export_command(
    version: Annotated[str, typer.Argument(help=f"The version: {VERSION_HELP}.")],
    dest: Annotated[Path, typer.Argument(help="A new (or empty) folder to write the PEFT adapter into.")],
    run: RunOpt = None, bucket: BucketOpt = None, runs_dir: RunsDirOpt = Path("runs"),
    store: Annotated[str | None, typer.Option(
        "--store", help="The run's store URL, for the card's tasks and instances; default RUNS_DIR/RUN_ID/store.db.")] = None,
    with_base: Annotated[bool, typer.Option(
        help="Carry the base weights the adapter was trained on in DIR/base when the hub id does not name "
             "them (the embedded model is de-quantised from a GGUF); --no-with-base: name the hub id only.")] = True,
    push: Annotated[str | None, typer.Option(help="Also upload the folder to this hub repo (user/name).")] = None,
) -> None:
    """Copies a version (checked against its manifest) into DIR as a plain PEFT folder: the weights,
    adapter_config.json, the base they were trained on (DIR/base, when the hub's differ) and a model
    card (README.md) with the envs, tasks and instances it was trained on and the run's held-out
    figures. Load it with PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(DIR/"base"), DIR)."""
    from gymfleet.trainer import export_version

    adapters = _bucket(run, bucket, runs_dir)
    n = pick_version(version, adapters.versions(), f"the bucket {adapters.root} of run {adapters.run_id}")
    url = store or str(runs_dir / adapters.run_id / "store.db")
    folder = export_version(adapters, n, dest, _heldout(runs_dir / adapters.run_id / "report" / "report.json"),
                            _trained_on(url, adapters, n), with_base=with_base)
    print(f"exported v{n} of run {adapters.run_id} to {folder}"
          + (" (with the base it was trained on in base/)" if (folder / "base").is_dir() else ""))
    if push:
        print(f"pushed to {_push(folder, push)}")


def _trained_on(store_url: str, adapters: Any, version: int) -> dict[str, dict[str, Any]]:
    """Per task, the env id and the instance ids of the groups versions 1..``version`` consumed,
    and, as ``<task> (warm start)``, those of the demonstrations a warm-start version among them
    was trained on (empty when the store cannot be read: the card then says it is not recorded)."""
    from gymfleet.core.errors import StoreError
    from gymfleet.orchestrator import TrajectoryStore
    from gymfleet.run.demonstrations import demo_run_id, load_demonstrations

    versions = [a for a in adapters.committed_newest_first() if a.version <= version]
    consumed = {g for a in versions for g in a.meta.get("consumed_group_ids") or []}
    warm = any(a.meta.get("demonstrations_run_id") for a in versions)
    if not (consumed or warm) or "://" not in store_url and not Path(store_url).is_file():
        return {}

    async def read() -> dict[str, dict[str, Any]]:
        async with await TrajectoryStore.open(store_url) as s:
            rows = [(r, "") for r in await s.trajectories(adapters.run_id, limit=None)
                    if r.trajectory.group_id in consumed]
            if warm:  # the demonstrations the warm start learned from (solved ones only)
                used = {t.rollout_id for t in await load_demonstrations(s, adapters.run_id)}
                rows += [(r, " (warm start)") for r in await s.trajectories(demo_run_id(adapters.run_id), limit=None)
                         if r.trajectory.rollout_id in used]
        out: dict[str, dict[str, Any]] = {}
        for r, stage in rows:
            task = out.setdefault(r.task + stage, {"env_id": r.trajectory.env_id, "instances": set()})
            task["instances"].add(r.trajectory.instance_id)
        return {k: {**v, "instances": sorted(v["instances"])} for k, v in out.items()}

    try:
        return asyncio.run(read())
    except StoreError:
        return {}


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
