"""SWE-bench on real instances: how many can be provisioned offline, and gold/empty on a sample.

``--dry-run`` counts, over the whole dataset, the instances whose spec can be provisioned here
(its Python is reachable offline and no conda-only package is left untranslated; an
``environment.yml`` spec is counted only when the mirror holds the repository to read it, a
``requirements.txt`` spec only when the mirror has one of swebench's requirements paths at the
setup commit: what the build reads), by repo and by reason; nothing is built. Progress lines
give each instance's own seconds.

Without it, one instance per (repo, version) (``--per-version N``: N) that can be provisioned
and whose repository is in the mirror runs twice through ``gymfleet eval swebench``'s
:func:`evaluate`: with its gold patch (must resolve) and with an empty patch (must not: counted
from its tests_status, as an empty patch is never reported resolved). At most ``--max-workers``
instances at once; each finished instance is a line of ``<out>/sweep.jsonl``, so a rerun resumes;
its instance and env images are removed once graded (``--keep-images`` keeps them; the
per-Python parents stay). Prints JSON, and a markdown table (``--table FILE`` writes it).

Usage: ``python benchmarks/swe_sweep.py DATASET --repo-mirror DIR [--per-version 1]
[--dry-run] [--repos OWNER/NAME ...] [--instance-ids ID ...] [--out runs/swe-sweep] [--max-workers 2] [--timeout 900] [--table docs/...]
[--spec-table FILE] [--hardened]`` (default grading: the official harness's, as ``gymfleet eval
swebench``; ``--hardened``: ``gymfleet/SWE-v0``'s) (default spec table: ``envs/swe/fixtures/drift.yaml``, pins for packages
that drifted since swebench's specs were written).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.errors import SWEError
from gymfleet.envs.swe.evaluation import EvalConfig, evaluate
from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig
from gymfleet.envs.swe.instances import FIXTURES_DIR, SWEInstance, load_instances
from gymfleet.envs.swe.specs import RepoSpec

DRIFT_TABLE = FIXTURES_DIR / "drift.yaml"
"""Pins for packages that drifted since swebench's specs were written (see the file)."""


def classify(harness: SWEHarness, instance: SWEInstance) -> str:
    """``ok``, or why the instance cannot be provisioned (first line of the error)."""
    try:
        spec = harness.spec(instance)
        harness.images.check(instance, spec)
        if spec.packages.strip() == "environment.yml" and not in_mirror(harness, instance):
            return "environment.yml spec: repository not in the mirror, cannot be read"
        unread = unreadable_requirements(harness, instance, spec)
        if unread:
            return unread
    except SWEError as exc:
        text = str(exc)
        if "asks for Python" in text:
            return f"Python {harness.spec(instance).python} not reachable offline"
        return f"{type(exc).__name__}: {text.splitlines()[0][:160]}"
    return "ok"


def unreadable_requirements(harness: SWEHarness, instance: SWEInstance, spec: RepoSpec) -> str:
    """Why the build could not read a ``requirements.txt`` spec's file (the paths swebench reads,
    from the mirror at the setup commit, as the build does), or "" when it can, or when the
    repository is a bundle or a URL (read at build time)."""
    if spec.packages.strip() != "requirements.txt" or not in_mirror(harness, instance):
        return ""
    paths = upstream.constants().MAP_REPO_TO_REQS_PATHS.get(instance.repo, ["requirements.txt"])
    commit = instance.setup_commit
    if any(harness.images.repos.read_file(instance.repo, commit, p) is not None for p in paths):
        return ""
    return (f"requirements.txt spec: none of {', '.join(paths)} can be read from the mirror at "
            "the setup commit")


def in_mirror(harness: SWEHarness, instance: SWEInstance) -> bool:
    try:
        return "://" not in harness.images.repos.locate(instance.repo)
    except SWEError:
        return False


def dry_run(harness: SWEHarness, instances: list[SWEInstance]) -> dict[str, Any]:
    by_repo: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: Counter[str] = Counter()
    for instance in instances:
        why = classify(harness, instance)
        by_repo[instance.repo]["provisionable" if why == "ok" else "refused"] += 1
        by_repo[instance.repo]["in_mirror"] += in_mirror(harness, instance)
        if why != "ok":
            reasons[why] += 1
    total = sum(c["provisionable"] for c in by_repo.values())
    return {"instances": len(instances), "provisionable": total,
            "python_fallback": harness.config.images.python_fallback,
            "by_repo": {r: dict(c) for r, c in sorted(by_repo.items())},
            "refused_by_reason": dict(reasons.most_common())}


def sample(instances: list[SWEInstance], per_version: int,
           repos: list[str] | None = None) -> list[SWEInstance]:
    """The first ``per_version`` instances of each (repo, version), in dataset order; with
    ``repos``, only those repositories, in that order (so the fast ones finish first)."""
    if repos:
        rank = {repo: i for i, repo in enumerate(repos)}
        instances = sorted((i for i in instances if i.repo in rank), key=lambda i: rank[i.repo])
    taken: Counter[tuple[str, str]] = Counter()
    chosen = []
    for instance in instances:
        key = (instance.repo, instance.version)
        if taken[key] < per_version:
            taken[key] += 1
            chosen.append(instance)
    return chosen


async def run_one(harness: SWEHarness, args: argparse.Namespace, instance: SWEInstance) -> dict[str, Any]:
    row: dict[str, Any] = {"instance_id": instance.instance_id, "repo": instance.repo,
                           "version": instance.version, "python": harness.spec(instance).python}
    start = time.monotonic()
    try:
        image = await harness.provision(instance)
        row.update(built=True, image=image.tag, origin=image.origin,
                   build_s=round(time.monotonic() - start, 1))
    except SWEError as exc:
        row.update(built=False, build_s=round(time.monotonic() - start, 1),
                   error=f"{type(exc).__name__}: {str(exc)[:600]}")
        return row
    for kind in ("gold", "empty"):
        config = EvalConfig(dataset=args.dataset, predictions=kind, instance_ids=[instance.instance_id],
                            run_id=f"sweep-{kind}", output_dir=args.out, max_workers=1,
                            run_empty_patches=True, harness=harness.config)
        summary, layout = await evaluate(config, harness=harness)
        report = layout.finished_report(instance.instance_id)
        row[f"{kind}_error"] = summary.errors.get(instance.instance_id)
        row[f"{kind}_resolved"] = would_resolve(report)
        row[f"{kind}_tests_s"] = tests_seconds(layout.instance_dir(instance.instance_id))
    if not args.keep_images:
        await asyncio.to_thread(remove_images, harness, image.tag)
    return row


def would_resolve(report: dict[str, Any] | None) -> bool | None:
    """Resolved by its tests_status (an empty patch's report says resolved: false anyway)."""
    if report is None or "tests_status" not in report:
        return None
    status = report["tests_status"]
    return not status["FAIL_TO_PASS"]["failure"] and not status["PASS_TO_PASS"]["failure"]


def tests_seconds(folder: Path) -> float | None:
    log = folder / "run_instance.log"
    if not log.is_file():
        return None
    for line in log.read_text().splitlines():
        if line.startswith("timings_s "):
            return json.loads(line.split(" ", 1)[1]).get("tests")
    return None


def remove_images(harness: SWEHarness, instance_tag: str) -> None:
    """Removes the instance image and the env image it was built FROM (parents stay)."""
    client = harness.images.client()
    try:
        env_tag = client.images.get(instance_tag).labels.get("gymfleet.swe.spec", "")
    except Exception:
        env_tag = ""
    for tag in (instance_tag, env_tag):
        if tag.startswith("gymfleet/swe"):
            try:
                client.images.remove(tag, force=True)
            except Exception as exc:  # in use by a neighbour, or gone: keep going
                print(f"could not remove {tag}: {exc}", file=sys.stderr)


def table(rows: list[dict[str, Any]], provisionable: dict[str, int]) -> str:
    by_repo: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_repo[row["repo"]].append(row)
    lines = ["| repo | provisionable (whole split) | run | built | gold resolved | empty resolved | build s (median) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]

    def line(name: str, group: list[dict[str, Any]], prov: int) -> str:
        built = [r for r in group if r.get("built")]
        gold = sum(bool(r.get("gold_resolved")) for r in built)
        empty = sum(bool(r.get("empty_resolved")) for r in built)
        secs = sorted(r["build_s"] for r in built)
        median = secs[len(secs) // 2] if secs else 0
        return f"| {name} | {prov} | {len(group)} | {len(built)} | {gold}/{len(built)} | {empty}/{len(built)} | {median:.0f} |"

    for repo, group in sorted(by_repo.items()):
        lines.append(line(repo, group, provisionable.get(repo, 0)))
    lines.append(line("**all**", rows, sum(provisionable.values())))
    failures = [r for r in rows if not r.get("built") or not r.get("gold_resolved") or r.get("empty_resolved")]
    if failures:
        lines += ["", "| instance | python | what failed | reason |", "| --- | --- | --- | --- |"]
        for r in failures:
            what = ("build" if not r.get("built") else "gold" if not r.get("gold_resolved")
                    else "empty resolved")
            why = r.get("error") or r.get("gold_error") or "tests (see docs)"
            lines.append(f"| {r['instance_id']} | {r['python']} | {what} | {str(why).splitlines()[0][:140]} |")
    return "\n".join(lines)


async def sweep(args: argparse.Namespace, harness: SWEHarness, instances: list[SWEInstance]) -> list[dict[str, Any]]:
    done_path = args.out / "sweep.jsonl"
    args.out.mkdir(parents=True, exist_ok=True)
    done = {json.loads(l)["instance_id"]: json.loads(l) for l in done_path.read_text().splitlines()
            if l.strip()} if done_path.exists() else {}
    only = {i for item in args.instance_ids or [] for i in item.split(",") if i}
    todo = [i for i in sample(instances, args.per_version, args.repos)
            if classify(harness, i) == "ok" and in_mirror(harness, i) and i.instance_id not in done
            and (not only or i.instance_id in only)]
    gate = asyncio.Semaphore(args.max_workers)
    print(f"sweep: {len(done)} done before, {len(todo)} to run", file=sys.stderr, flush=True)

    async def one(instance: SWEInstance) -> None:
        async with gate:
            print(f"start {instance.instance_id}", file=sys.stderr, flush=True)
            began = time.monotonic()
            row = await run_one(harness, args, instance)
            row["instance_s"] = round(time.monotonic() - began, 1)
            done[instance.instance_id] = row
            with done_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"done {instance.instance_id}: built={row.get('built')} gold={row.get('gold_resolved')} "
                  f"empty={row.get('empty_resolved')} ({row['instance_s']:.0f} s) "
                  f"{row.get('error') or row.get('gold_error') or ''}"[:300],
                  file=sys.stderr, flush=True)

    async with asyncio.TaskGroup() as group:
        for instance in todo:
            group.create_task(one(instance))
    return list(done.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--repo-mirror", type=Path, action="append", default=[])
    parser.add_argument("--per-version", type=int, default=1)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--repos", nargs="+", default=None, metavar="OWNER/NAME",
                        help="run only these repositories, in this order (default: all, dataset order)")
    parser.add_argument("--python-fallback", choices=["none", "nearest"], default="none")
    parser.add_argument("--instance-ids", nargs="+", default=None, metavar="ID",
                        help="of the sample, run only these (space- or comma-separated)")
    parser.add_argument("--out", type=Path, default=Path("runs/swe-sweep"))
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--keep-images", action="store_true")
    parser.add_argument("--hardened", action="store_true",
                        help="grade as gymfleet/SWE-v0 does (default: the official harness's way)")
    parser.add_argument("--table", type=Path, help="also write the markdown table here")
    parser.add_argument("--spec-table", type=Path, action="append", default=None,
                        help="spec tables over swebench's (default: envs/swe/fixtures/drift.yaml)")
    args = parser.parse_args()
    tables = args.spec_table if args.spec_table is not None else [DRIFT_TABLE]
    config = SWEHarnessConfig(repo_mirrors=args.repo_mirror, allow_clone=False, eval_timeout_s=args.timeout,
                              setup_timeout_s=1200, spec_tables=tables,
                              grading="hardened" if args.hardened else "official")
    config.images.python_fallback = args.python_fallback
    harness = SWEHarness(config)
    instances = load_instances(args.dataset)
    counts = dry_run(harness, instances)
    if args.dry_run:
        print(json.dumps(counts, indent=2))
        return
    rows = asyncio.run(sweep(args, harness, instances))
    built = [r for r in rows if r.get("built")]
    result = {
        "dry_run": counts,
        "instances_run": len(rows), "repos": len({r["repo"] for r in rows}), "built": len(built),
        "gold_resolved": sum(bool(r.get("gold_resolved")) for r in built),
        "empty_resolved": sum(bool(r.get("empty_resolved")) for r in built),
        "gold_resolved_rate": round(sum(bool(r.get("gold_resolved")) for r in built) / max(len(built), 1), 3),
        "rows": sorted(rows, key=lambda r: r["instance_id"]),
    }
    text = table(rows, {r: c.get("provisionable", 0) for r, c in counts["by_repo"].items()})
    if args.table:
        args.table.write_text(text + "\n")
    print(json.dumps(result, indent=2))
    print(text, file=sys.stderr)


if __name__ == "__main__":
    main()
