"""Harbor / Terminal-Bench task corpus sweep: per task build, no-op (0 expected), oracle (1 expected).

    python benchmarks/harbor_sweep.py [PATH] [--dry-run] [--limit N] [--max-workers N] [--out FILE]
                                      [--keep-processes GLOBS] [--verdicts FILE]

PATH is a task folder, a folder of task folders, or a glob (docs/harbor.md). Each task is built
(``gymfleet-harbor/<task>:<hash>``, cached), played once with ``submit`` alone (no-op) and, when
it has a solution, once with its ``solve.sh`` (the oracle), on Docker. ``--dry-run`` only loads
and translates. Rows are appended to ``--out`` as they finish; a second run skips the tasks
already there (resumable). Prints one JSON object: counts by outcome, counts by reason, build
time p50 and the per-task table. Each row that did not end ``ok`` is classified (``fault``:
the task's, out of scope, gymfleet's, with ``fault_reason``); an oracle below 1 whose processes
were stopped before the tests says so (``--keep-processes`` keeps them for those tasks). What the
rules leave ``unclassified`` a person classifies with ``--verdicts`` (``fault_by: "verdicts"``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gymfleet.core.errors import EnvError
from gymfleet.envs.errors import TaskError
from gymfleet.envs.harbor.build import HarborImageBuilder
from gymfleet.envs.harbor.dockerfile import UnbuildableError, logical_lines, substitute
from gymfleet.envs.harbor.env import EXAMPLES_DIR, HarborEnv
from gymfleet.envs.harbor.task import HarborTask, load_task, task_folders

ALLOWED_HOSTS = ("deb.debian.org", "security.debian.org", "archive.ubuntu.com", "pypi.org",
                 "files.pythonhosted.org", "registry.npmjs.org", "astral.sh")
"""Hosts a RUN line may fetch from for the task to count as needing only Debian, PyPI and npm."""
_URL = re.compile(r"https?://([\w.-]+)")


def needs(task: HarborTask) -> str:
    """``debian/pypi/npm`` when the Dockerfile fetches from nothing else, else what else it names.

    A ``FROM`` image with no Debian substitute (a bespoke image such as
    ``ghcr.io/laude-institute/t-bench/deveval``, whose contents nobody here can see) counts as
    something else: the task needs that image, not Debian packages."""
    if not task.dockerfile.is_file():
        return "no Dockerfile"
    others: set[str] = set()
    stages: set[str] = set()
    for line in logical_lines(task.dockerfile.read_text(errors="replace")):
        if line.upper().startswith("FROM"):
            words = [w for w in line.split()[1:] if not w.startswith("--")]
            if words and words[0].lower() not in stages and words[0] != "scratch" and "$" not in words[0] and substitute(words[0]) is None:
                others.add(f"FROM {words[0]}")
            if len(words) >= 3 and words[1].lower() == "as":
                stages.add(words[2].lower())
            continue
        if not line.upper().startswith(("RUN", "ADD")):
            continue
        others |= {h for h in _URL.findall(line) if not h.endswith(ALLOWED_HOSTS)}
        if "ppa:" in line or "add-apt-repository" in line:
            others.add("a Launchpad PPA")  # Ubuntu's personal archives, not Debian's
        if "git clone" in line:
            others.add("git clone")
    return "debian/pypi/npm" if not others else "other: " + ", ".join(sorted(others)[:3])


def reason_key(reason: str) -> str:
    """A reason reduced to its kind, for counting (the full text stays in the row): the task's
    name is dropped (``task 'x': task.toml does not validate: ...`` -> ``task.toml does not
    validate``)."""
    reason = re.sub(r"^task '[^']*'(?: \([^)]*\))?:? ", "", reason)
    if m := re.match(r"FROM (\S+?)(?::\S*)? cannot be pulled", reason):
        return f"no substitute for FROM {m.group(1)}"
    if m := re.search(r"returned a non-zero code: (\d+)", reason):
        return f"a RUN step failed (exit {m.group(1)})"
    if "COPY failed" in reason or "failed to compute cache key" in reason:
        return "COPY of a missing file"
    return re.sub(r"[\d.]+ s\b", "N s", reason.split(":")[0].split(" (")[0])[:80]


async def _episode(env: HarborEnv, task: HarborTask, actions: list[str]) -> dict[str, Any]:
    """One episode of ``actions``; a sandbox that does not start is told apart from grading."""
    try:
        await env.reset_async(options={"instance_id": task.name})
    except EnvError as exc:
        return {"reward": None, "error": f"{type(exc).__name__}: {_first_line(exc)}", "started": False}
    try:
        for action in actions:
            _, reward, terminated, truncated, info = await env.step_async(action)
            if terminated or truncated:
                grading = info.get("grading", {})
                return {"reward": reward, "error": info.get("grading_error"),
                        "stopped_processes": grading.get("stopped_processes", [])[:10],
                        "stopped_note": grading.get("stopped_note"),
                        "output_tail": str(grading.get("output_tail", ""))[-400:]}
        return {"reward": None, "error": "the episode did not end"}
    except EnvError as exc:
        return {"reward": None, "error": f"{type(exc).__name__}: {_first_line(exc)}"}


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:300]


async def sweep_task(folder: Path, builder: HarborImageBuilder, dry_run: bool,
                     keep_processes: list[str] | None = None) -> dict[str, Any]:
    """One task's row: build, a no-op episode and the oracle's, in one env (the task is read
    and its unknown keys warned about once), and the failure's :func:`classify`."""
    row: dict[str, Any] = {"task": folder.name, "path": str(folder)}
    try:
        task = load_task(folder, warn=False)  # the row lists them; the env warns once
    except TaskError as exc:
        return classify({**row, "outcome": "invalid", "reason": str(exc).splitlines()[0]})
    row.update(layout=task.layout, needs=needs(task), has_solution=task.solution_script is not None,
               unknown_keys=task.unknown_keys, test_needs=test_needs(task), writes_reward=writes_reward(task))
    try:
        plan = builder.plan(task)
        row["base_substitution"] = plan.translation.substitutions
        if dry_run:
            return classify({**row, "outcome": "translated"})
        image = await asyncio.to_thread(builder.ensure, task)
    except UnbuildableError as exc:
        return classify({**row, "outcome": "unbuildable", "reason": str(exc)})
    row["build"] = {"tag": image.tag, "built": image.built, "duration_s": round(image.duration_s, 3)}
    env = HarborEnv(sandbox="docker", path=str(task.path), task_ids=[task.name], keep_processes=keep_processes or [])
    try:
        row["nop"] = await _episode(env, task, ["submit"])
        if task.solution_script is not None:
            row["oracle"] = await _episode(env, task, env.gold_actions(task))
    finally:
        await env.close_async()
    row["outcome"] = _outcome(row)
    return classify(row)


def _outcome(row: dict[str, Any]) -> str:
    nop, oracle = row["nop"], row.get("oracle")
    if nop.get("started") is False or (oracle or {}).get("started") is False:
        return "sandbox did not start"
    if nop["error"]:
        return "verifier error (nop)"
    if nop["reward"] != 0.0:
        return "nop scored > 0"
    if oracle is None:
        return "ok (no solution)"
    if oracle["error"]:
        return "verifier error (oracle)"
    if oracle["reward"] != 1.0 and oracle.get("stopped_note"):
        return "oracle scored < 1 (its processes were stopped)"
    return "ok" if oracle["reward"] == 1.0 else "oracle scored < 1"


def test_needs(task: HarborTask) -> str:
    """``offline`` when the verifier script fetches nothing beyond what is staged (Debian, PyPI,
    uv), else the hosts it names: a verifier that needs the network cannot grade here."""
    if not task.test_script.is_file():
        return "offline"
    hosts = {h for h in _URL.findall(task.test_script.read_text(errors="replace")) if not h.endswith(ALLOWED_HOSTS)}
    return "offline" if not hosts else "network: " + ", ".join(sorted(hosts)[:3])


def writes_reward(task: HarborTask) -> bool:
    """Whether the verifier's files name a reward file at all (TB1's are read from pytest)."""
    if task.layout == "tb1":
        return True
    files = [task.test_script, *sorted(task.tests_dir.rglob("*.py"))] if task.tests_dir.is_dir() else []
    return any("reward" in p.read_text(errors="replace") for p in files if p.is_file())


def classify(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with ``fault`` (``none``, ``task``, ``out of scope``, ``gymfleet`` or
    ``unclassified``) and ``fault_reason``, from its outcome and what the task needs: a task
    Harbor could not run either is the task's fault; one needing what this family does not
    offer (another registry's image, network at build or test time, GPUs, a separate verifier)
    is out of scope; what is left is gymfleet's until shown otherwise."""
    outcome, reason = row["outcome"], row.get("reason", "")
    fault, why = _fault(row, outcome, reason)
    return {**row, "fault": fault, "fault_reason": why}


def _fault(row: dict[str, Any], outcome: str, reason: str) -> tuple[str, str]:
    if outcome in ("ok", "ok (no solution)", "translated"):
        return "none", ""
    if outcome == "invalid":
        return "task", f"not a valid Harbor task: {reason}"
    if outcome == "unbuildable":
        if "not supported here" in reason or "docker-compose" in reason or "parser" in reason:
            return "out of scope", reason.removeprefix("unbuildable: ")
        if "cannot be pulled here" in reason:
            return "out of scope", "its base image is not an official one (no Debian substitute)"
        if "COPY failed" in reason or "failed to compute cache key" in reason or "no Dockerfile" in reason:
            return "task", "its Dockerfile copies a file the task does not have"
        if row.get("needs", "debian/pypi/npm") != "debian/pypi/npm":
            return "out of scope", f"its build fetches from {row['needs'].removeprefix('other: ')}"
        return "gymfleet", f"the build failed on the Debian stand-in: {reason.removeprefix('unbuildable: ')}"
    if outcome == "sandbox did not start":
        return "out of scope", "the sandbox could not start on this host: " + (row["nop"].get("error") or "")
    if row.get("test_needs", "offline") != "offline":
        return "out of scope", f"its verifier needs the {row['test_needs']}"
    errors = " ".join(str((row.get(p) or {}).get("error") or "") for p in ("nop", "oracle"))
    if "wrote neither" in errors and not row.get("writes_reward", True):
        return "task", "its test.sh writes no reward file (Harbor cannot grade it either)"
    if outcome == "nop scored > 0":
        return "task", "its tests pass without any work"
    if outcome == "oracle scored < 1 (its processes were stopped)":
        return "gymfleet", "the solution's services were stopped before the tests (rerun with --keep-processes)"
    return "unclassified", f"{outcome}: read the output tail"


FAULTS = ("task", "out of scope", "gymfleet")
"""What a row's failure can be put down to, by rule (:func:`classify`) or by a person (``--verdicts``)."""


def load_verdicts(path: Path | None) -> dict[str, dict[str, str]]:
    """``--verdicts``: a JSON object ``{task: {"fault": one of FAULTS, "reason": "..."}}``, a
    person's reading of rows the rules leave ``unclassified`` (say, a solution that writes into a
    folder its image never makes).

    Raises:
        ValueError: the file does not read, or an entry is not of that shape (one line).
    """
    if path is None:
        return {}
    try:
        verdicts = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--verdicts {path}: {exc}") from exc
    if not isinstance(verdicts, dict):
        raise ValueError(f"--verdicts {path}: a JSON object of task -> {{fault, reason}} is expected")
    for name, verdict in verdicts.items():
        if (not isinstance(verdict, dict) or verdict.get("fault") not in FAULTS
                or not isinstance(verdict.get("reason"), str) or not verdict["reason"].strip()):
            raise ValueError(f"--verdicts {path}: {name!r} needs fault (one of {', '.join(FAULTS)}) and a reason")
    return verdicts


def apply_verdict(row: dict[str, Any], verdicts: dict[str, dict[str, str]]) -> dict[str, Any]:
    """``row`` with a person's verdict when the rules left it ``unclassified``
    (``fault_by: "verdicts"``); a rule's classification is never overridden."""
    verdict = verdicts.get(row["task"])
    if verdict is None or row.get("fault") != "unclassified":
        return row
    return {**row, "fault": verdict["fault"], "fault_reason": verdict["reason"], "fault_by": "verdicts"}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts by outcome and reason, the headline fractions, build times."""
    built = [r for r in rows if "build" in r]
    eligible = [r for r in rows if r.get("needs") == "debian/pypi/npm" and r["outcome"] != "invalid"]
    ran = [r for r in built if not r["nop"]["error"]]
    oracle = [r for r in built if "oracle" in r]
    fresh = [r["build"]["duration_s"] for r in built if r["build"]["built"]]
    cached = [r["build"]["duration_s"] for r in built if not r["build"]["built"]]
    reasons = collections.Counter(reason_key(r["reason"].removeprefix("unbuildable: ")) for r in rows if "reason" in r)
    for r in built:
        for phase in ("nop", "oracle"):
            if r.get(phase, {}).get("error"):
                reasons[f"{phase}: {reason_key(r[phase]['error'])}"] += 1
    return {
        "tasks": len(rows),
        "by_outcome": dict(collections.Counter(r["outcome"] for r in rows).most_common()),
        "by_fault": dict(collections.Counter(r.get("fault", "unclassified") for r in rows).most_common()),
        "by_reason": dict(reasons.most_common()),
        "needing_only_debian_pypi_npm": len(eligible),
        "built_of_those": sum("build" in r for r in eligible),
        "built": len(built),
        "verifier_ran_to_a_reward": len(ran),
        "nop_scored_0": sum(r["nop"]["reward"] == 0.0 and not r["nop"]["error"] for r in built),
        "with_oracle": len(oracle),
        "oracle_scored_1": sum(r["oracle"]["reward"] == 1.0 for r in oracle),
        "base_substitutions": dict(collections.Counter(s.split(" (")[0] for r in rows for s in r.get("base_substitution", [])).most_common(10)),
        "build_s_p50": round(statistics.median(fresh), 3) if fresh else None,
        "cached_build_s_p50": round(statistics.median(cached), 3) if cached else None,
    }


def _load(out: Path | None) -> dict[str, dict[str, Any]]:
    if out is None or not out.is_file():
        return {}
    return {row["path"]: row for row in json.loads(out.read_text()).get("rows", [])}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    folders = task_folders(args.path)[: args.limit] if args.limit else task_folders(args.path)
    done = _load(args.out)
    for row in done.values():  # rows of an earlier run: counted by the classifier of this one
        with contextlib.suppress(TaskError, KeyError):
            row["needs"] = needs(load_task(Path(row["path"])))
    builder = HarborImageBuilder()
    gate = asyncio.Semaphore(args.max_workers)
    started = time.monotonic()

    async def one(folder: Path) -> None:
        async with gate:
            done[str(folder)] = await sweep_task(folder, builder, args.dry_run, args.keep_processes)
            if args.out is not None:
                _write(args.out, list(done.values()))
            print(f"{folder.name}: {done[str(folder)]['outcome']}", file=sys.stderr, flush=True)

    await asyncio.gather(*(one(f) for f in folders if str(f) not in done))
    rows = [apply_verdict(done[str(f)], args.verdicts) for f in folders if str(f) in done]
    return {"path": str(args.path), "dry_run": args.dry_run, "duration_s": round(time.monotonic() - started, 1),
            "summary": summarise(rows), "rows": rows}


def _write(out: Path, rows: list[dict[str, Any]]) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rows": rows}, indent=1))
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(EXAMPLES_DIR),
                        help="task folder, folder of task folders, or glob (default: the family's two examples)")
    parser.add_argument("--dry-run", action="store_true", help="load and translate only; build nothing")
    parser.add_argument("--limit", type=int, default=0, help="the first N tasks only (0: all)")
    parser.add_argument("--max-workers", type=int, default=2, help="tasks at once")
    parser.add_argument("--out", type=Path, default=None, help="rows file: written as tasks finish, read to resume")
    parser.add_argument("--keep-processes", default="", metavar="GLOBS",
                        help="task ids or globs (comma-separated) whose tests run beside the processes the agent left "
                             "(the env's keep_processes): for solutions that leave a service for the tests")
    parser.add_argument("--verdicts", type=Path, default=None, metavar="FILE",
                        help="JSON {task: {fault, reason}}: a person's classification of rows the rules leave "
                             "unclassified (fault: task, out of scope or gymfleet)")
    args = parser.parse_args(argv)
    try:
        args.verdicts = load_verdicts(args.verdicts)
    except ValueError as exc:
        print(f"harbor_sweep: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    args.keep_processes = [g.strip() for g in args.keep_processes.split(",") if g.strip()]
    if args.max_workers < 1 or args.limit < 0:
        print("harbor_sweep: --max-workers must be >= 1 and --limit >= 0", file=sys.stderr)
        return 2
    try:
        result = asyncio.run(main_async(args))
    except TaskError as exc:
        print(f"harbor_sweep: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
