"""What `import gymfleet` costs, against a baseline commit's `gymfleet/`; prints JSON.

Each sample is a fresh interpreter that imports one ``gymfleet/`` folder and reports the CPU time
of that import alone (``time.process_time``, less sensitive to other load than wall time) and the
modules it added. Before (``--baseline`` commit, default the one before registration on import)
and after (this checkout) alternate, under ``python -S`` (no site-packages, so no editable-install
finder) with bytecode cached, as an installed package has it. Also measured: ``import gymnasium``
alone and after ``import gymfleet`` (the registration, paid when Gymnasium is imported).

Usage: ``python benchmarks/import_time.py [--n 15] [--baseline c4b4c87]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = ("import sys, time; n = len(sys.modules); t = time.process_time(); import {module}; "
         "print(time.process_time() - t, len(sys.modules) - n, 'gymnasium' in sys.modules)")


def _sample(code: str, env: dict[str, str], isolated: bool) -> tuple[float, int, bool]:
    args = [sys.executable, *(["-S"] if isolated else []), "-c", code]
    out = subprocess.run(args, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
    cpu_s, n_modules, gymnasium = out.stdout.split()
    return float(cpu_s), int(n_modules), gymnasium == "True"


def _summary(samples: list[tuple[float, int, bool]]) -> dict[str, object]:
    cpu_ms = [s[0] * 1000 for s in samples]
    return {"cpu_ms_median": round(statistics.median(cpu_ms), 2), "cpu_ms_min": round(min(cpu_ms), 2),
            "modules_added": samples[0][1], "imports_gymnasium": samples[0][2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=15, help="samples per figure")
    parser.add_argument("--baseline", default="c4b4c87", help="commit whose gymfleet/ is 'before'")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for name, ref in (("before", args.baseline), ("after", "HEAD")):
            trees[name] = Path(tmp, name)
            trees[name].mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "gymfleet"], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(trees[name])], input=archive.stdout, check=True)
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        envs = {name: {**base, "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(Path(tmp, "pyc", name))}
                for name, tree in trees.items()}
        samples: dict[str, list[tuple[float, int, bool]]] = {"before": [], "after": []}
        for i in range(args.n + 1):  # the first round writes the bytecode and is not counted
            for name in ("before", "after"):
                sample = _sample(PROBE.format(module="gymfleet"), envs[name], isolated=True)
                if i:
                    samples[name].append(sample)
        gymnasium = {"alone": [], "after_import_gymfleet": []}
        cached = {**base, "PYTHONPYCACHEPREFIX": str(Path(tmp, "pyc", "site"))}
        for i in range(args.n + 1):  # needs site-packages: this checkout's install
            alone = _sample(PROBE.format(module="gymnasium"), cached, isolated=False)
            after = _sample("import gymfleet; " + PROBE.format(module="gymnasium"), cached, isolated=False)
            if i:
                gymnasium["alone"].append(alone)
                gymnasium["after_import_gymfleet"].append(after)
    before, after = _summary(samples["before"]), _summary(samples["after"])
    print(json.dumps({
        "n": args.n, "baseline": args.baseline,
        "import_gymfleet": {"before": before, "after": after,
                            "ratio_after_over_before": round(after["cpu_ms_median"] / before["cpu_ms_median"], 3)},
        "import_gymnasium": {k: _summary(v) for k, v in gymnasium.items()},
    }, indent=2))


if __name__ == "__main__":
    main()
