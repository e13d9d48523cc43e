"""SWE-bench evaluation speed on the fixture instances; prints JSON.

Measures, in one run: the image build cold (the SWE parent image and the per-repo+version
images removed first) and cached (every image already there: one lookup each); then the gold
evaluation throughput, in instances per minute, with 1 worker (the baseline) and with 4, and
their ratio. The Docker daemon must answer and ``gymfleet/base`` be buildable.

Usage: ``python benchmarks/swe_eval.py [--workers 1 4] [--keep-images]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import docker
import docker.errors

from gymfleet.envs.swe.evaluation import EvalConfig, evaluate
from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig
from gymfleet.envs.swe.instances import load_instances


def remove_swe_images(client: docker.DockerClient) -> list[str]:
    """Removes the SWE parent image and every per-repo SWE image (not gymfleet/base)."""
    removed = []
    for image in client.images.list():
        for tag in image.tags:
            if tag.startswith(("gymfleet/swe:", "gymfleet/swe.")):
                client.images.remove(tag, force=True)
                removed.append(tag)
    return removed


async def provision_all(harness: SWEHarness) -> dict[str, object]:
    """Provisions every fixture instance (concurrently, as an evaluation does)."""
    instances = load_instances("fixtures")
    start = time.monotonic()
    refs = await asyncio.gather(*(harness.provision(i) for i in instances))
    return {"seconds": round(time.monotonic() - start, 2),
            "images": sorted({r.tag for r in refs}),
            "origins": sorted({r.origin for r in refs})}


async def throughput(harness: SWEHarness, workers: int, out: Path) -> dict[str, object]:
    config = EvalConfig(predictions="gold", run_id=f"bench-w{workers}-{time.time_ns()}",
                        output_dir=out, max_workers=workers, harness=harness.config)
    start = time.monotonic()
    summary, _ = await evaluate(config, harness=harness)
    seconds = time.monotonic() - start
    n = len(summary.submitted_ids)
    return {"workers": workers, "instances": n, "resolved": len(summary.resolved_ids),
            "seconds": round(seconds, 2), "instances_per_min": round(60 * n / seconds, 2)}


async def main(workers: list[int], keep_images: bool) -> dict[str, object]:
    harness = SWEHarness(SWEHarnessConfig(allow_clone=False))
    client = docker.from_env()
    result: dict[str, object] = {"instances": len(load_instances("fixtures"))}
    if not keep_images:
        result["removed_images"] = remove_swe_images(client)
    result["image_build_cold"] = await provision_all(harness)
    harness = SWEHarness(harness.config)  # a fresh provider: nothing cached in memory
    result["image_build_cached"] = await provision_all(harness)
    sizes = {t: round(client.images.get(t).attrs["Size"] / 1e6, 1)
             for t in result["image_build_cached"]["images"]}  # type: ignore[index]
    result["image_size_mb"] = sizes
    with tempfile.TemporaryDirectory() as tmp:
        runs = [await throughput(harness, w, Path(tmp)) for w in workers]
    result["eval"] = runs
    base = runs[0]["instances_per_min"]
    result["speedup_vs_1_worker"] = {
        str(r["workers"]): round(r["instances_per_min"] / base, 2) for r in runs  # type: ignore[operator]
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--keep-images", action="store_true",
                        help="skip removing the SWE images first (no cold build figure)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.workers, args.keep_images)), indent=2))
