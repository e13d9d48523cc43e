"""SWE-bench evaluation and gymfleet/SWE-v0 on the five fixture instances, in real Docker.

One harness (and so one set of images: the SWE parent plus one per repo+version) is shared by
every test of this module.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from gymfleet.envs.base import ConstantPolicy
from gymfleet.envs.episode import run_episode
from gymfleet.envs.registry import make_agent_env
from gymfleet.envs.sandbox import get_backend
from gymfleet.envs.swe.evaluation import EvalConfig, evaluate
from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig
from gymfleet.envs.swe.instances import load_instances

pytestmark = pytest.mark.docker

SLEEPY_PATCH = """diff --git a/src/semver/__init__.py b/src/semver/__init__.py
--- a/src/semver/__init__.py
+++ b/src/semver/__init__.py
@@ -1,3 +1,6 @@
+import time
+
+time.sleep(600)
 \"\"\"
 Semver package major release 3.
 
"""


@pytest.fixture(scope="module")
def harness(docker_available: bool) -> SWEHarness:
    return SWEHarness(SWEHarnessConfig(eval_timeout_s=300, allow_clone=False))


@pytest.fixture(scope="module")
def gold_run(harness: SWEHarness, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("eval")
    config = EvalConfig(predictions="gold", run_id="gold", output_dir=out, max_workers=4)
    summary, layout = asyncio.run(evaluate(config, harness=harness))
    return config, summary, layout


def test_gold_resolves_every_instance(gold_run) -> None:  # type: ignore[no-untyped-def]
    _, summary, layout = gold_run
    ids = [i.instance_id for i in load_instances("fixtures")]
    assert len(ids) >= 5
    assert sorted(summary.resolved_ids) == sorted(ids), summary.errors
    saved = json.loads(layout.summary_path.read_text())
    assert saved["resolved_instances"] == len(ids) and saved["error_ids"] == []
    for instance_id in ids:
        report = json.loads((layout.instance_dir(instance_id) / "report.json").read_text())
        status = report[instance_id]["tests_status"]
        assert status["FAIL_TO_PASS"]["failure"] == [] and status["PASS_TO_PASS"]["failure"] == []
        assert ">>>>> Start Test Output" in (layout.instance_dir(instance_id)
                                             / "test_output.txt").read_text()


def test_second_run_redoes_nothing(gold_run, harness: SWEHarness) -> None:  # type: ignore[no-untyped-def]
    config, first, layout = gold_run
    before = {p: p.stat().st_mtime_ns for p in layout.run_dir.glob("*/report.json")}
    seen: list[str] = []
    summary, _ = asyncio.run(evaluate(config, lambda _id, outcome, _s: seen.append(outcome),
                                      harness=harness))
    assert seen == ["skipped"] * len(before)
    assert sorted(summary.resolved_ids) == sorted(first.resolved_ids)
    assert {p: p.stat().st_mtime_ns for p in layout.run_dir.glob("*/report.json")} == before


def test_empty_patches_resolve_nothing_and_fail_every_fail_to_pass_test(
    harness: SWEHarness, tmp_path: Path
) -> None:
    config = EvalConfig(predictions="empty", run_id="empty", output_dir=tmp_path, max_workers=4,
                        run_empty_patches=True)
    summary, layout = asyncio.run(evaluate(config, harness=harness))
    assert summary.resolved_ids == [] and summary.error_ids == []
    assert len(summary.empty_patch_ids) == summary.total_instances
    for inst in load_instances("fixtures"):
        report = json.loads((layout.instance_dir(inst.instance_id) / "report.json").read_text())
        f2p = report[inst.instance_id]["tests_status"]["FAIL_TO_PASS"]
        assert f2p["success"] == [] and sorted(f2p["failure"]) == sorted(inst.FAIL_TO_PASS)


def test_bad_patch_timeout_and_unbuildable_image_are_instance_errors(
    harness: SWEHarness, tmp_path: Path
) -> None:
    instances = load_instances("fixtures")
    semver = [i for i in instances if i.repo == "python-semver/python-semver"]
    # a row of a real SWE-bench repo whose spec asks for Python 3.6 (not reachable offline)
    foreign = semver[0].model_copy(update={"instance_id": "django__django-11099",
                                           "repo": "django/django", "version": "3.0"})
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("\n".join(json.dumps(i.row()) for i in [*semver, foreign]) + "\n")
    preds = tmp_path / "p.jsonl"
    mangled = semver[0].patch.replace("@@", "@ @").replace("+", "-")  # patch(1) "applies" it
    wrong_line = semver[2].patch.replace('(token or "rc")', '(token or "pre")', 1)
    assert wrong_line != semver[2].patch
    patches = {semver[0].instance_id: mangled, semver[1].instance_id: SLEEPY_PATCH,
               semver[2].instance_id: wrong_line, "django__django-11099": semver[0].patch}
    preds.write_text("\n".join(json.dumps({"instance_id": k, "model_name_or_path": "m",
                                           "model_patch": v}) for k, v in patches.items()))
    quick = SWEHarness(harness.config.model_copy(update={"eval_timeout_s": 20}))
    quick.images = harness.images  # same image cache
    config = EvalConfig(dataset=str(dataset), predictions=str(preds), run_id="bad",
                        output_dir=tmp_path, max_workers=4)
    summary, layout = asyncio.run(evaluate(config, harness=quick))
    assert sorted(summary.error_ids) == sorted(patches), summary.as_dict()
    assert summary.errors[semver[0].instance_id].startswith("patch did not apply")
    assert summary.errors[semver[2].instance_id].startswith("patch did not apply")
    assert summary.errors[semver[1].instance_id] == "tests timed out after 20 s"
    assert "asks for Python 3.6" in summary.errors["django__django-11099"]
    assert ">>>>> Tests Timed Out" in (layout.instance_dir(semver[1].instance_id)
                                      / "test_output.txt").read_text()
    assert not list(layout.run_dir.glob("*/report.json"))


def test_swe_env_gold_earns_1_and_noop_0_on_every_instance(docker_available: bool) -> None:
    gate = asyncio.Semaphore(5)
    backend = get_backend("docker")  # shared: one thread pool and one orphan sweep

    async def episode(policy_name: str, instance_id: str) -> float:
        async with gate:
            env = make_agent_env("gymfleet/SWE-v0", instance_ids=[instance_id], backend=backend)
            try:
                await env.reset_async(options={"instance_id": instance_id})
                policy = env.gold_policy() if policy_name == "gold" else ConstantPolicy(
                    env.noop_action)
                ep = await run_episode(env, policy, instance_id=instance_id, max_turns=4)
            finally:
                await env.close_async()
        assert ep.terminated and ep.info["instance_id"] == instance_id
        assert ep.info["error"] is None, ep.info["error"]
        return ep.reward

    ids = [i.instance_id for i in load_instances("fixtures")]

    async def all_episodes() -> list[float]:
        return await asyncio.gather(*(episode(p, i) for p in ("gold", "noop") for i in ids))

    rewards = asyncio.run(all_episodes())
    assert rewards == [1.0] * len(ids) + [0.0] * len(ids)


def test_swe_env_malformed_action_and_test_edits(docker_available: bool) -> None:
    async def play() -> dict:
        env = make_agent_env("gymfleet/SWE-v0", instance_ids=["python-semver__python-semver-426"])
        try:
            obs, _ = await env.reset_async(seed=0)
            assert obs.startswith("<issue>") and env.system_prompt not in obs  # not sent twice
            obs, reward, terminated, _, _ = await env.step_async("just text")
            assert "exactly one ```bash" in obs and not terminated and reward == 0
            obs, *_ = await env.step_async("```bash\necho hi >> tests/test_subclass.py && "
                                           "echo '# note' >> README.rst && git status --short\n```")
            assert obs.startswith("exit code 0")
            *_, terminated, _, info = await env.step_async(env.noop_action)
            return {"terminated": terminated, **info}
        finally:
            await env.close_async()

    info = asyncio.run(play())
    assert info["terminated"]
    assert "README.rst" in info["patch"] and "tests/test_subclass.py" not in info["patch"]
    assert info["report"]["python-semver__python-semver-426"]["resolved"] is False


def test_swe_env_grades_the_real_diff_whatever_the_agents_git_config(docker_available: bool) -> None:
    """Issue 42: the agent points `diff.external` at a program printing a root conftest.py (in
    git's quoted header form) that turns the FAIL_TO_PASS test into a no-op and spares the canary;
    on main b894e5e that diff was graded and earned 1. The env reads its diff with its own git
    settings: the graded patch is the README edit the agent made, reward 0."""
    spare = ("def pytest_collection_modifyitems(items):\n    for item in items:\n"
             "        if item.name == 'test_replace_from_subclass':\n"
             "            item.obj = lambda *args, **kwargs: None\n")
    body = "".join(f"+{line}\n" for line in spare.splitlines())
    fake = (f'diff --git "a/conftest.py" "b/conftest.py"\nnew file mode 100644\n--- /dev/null\n'
            f'+++ "b/conftest.py"\n@@ -0,0 +1,{len(spare.splitlines())} @@\n{body}')
    # git runs it per changed file (path old-file old-hex old-mode new-file ...): it prints the
    # conftest.py, then the real README change, so the patch also changes a tracked file
    program = ('#!/bin/sh\ncat /tmp/fake.diff\necho "diff --git a/$1 b/$1"\n'
               'diff -u --label "a/$1" --label "b/$1" "$2" "$5"\ntrue\n')
    encoded, script = (base64.b64encode(t.encode()).decode() for t in (fake, program))
    action = ("```bash\n"
              f"echo {encoded} | base64 -d > /tmp/fake.diff && "
              f"echo {script} | base64 -d > /tmp/fake.sh && chmod +x /tmp/fake.sh && "
              "git config diff.external /tmp/fake.sh && git config diff.noprefix true && "
              "echo '# note' >> README.rst && git diff | head -3\n```")

    async def play() -> dict:
        env = make_agent_env("gymfleet/SWE-v0", instance_ids=["python-semver__python-semver-426"])
        try:
            await env.reset_async(seed=0)
            obs, *_ = await env.step_async(action)
            assert "conftest.py" in obs  # the agent's own `git diff` prints its program's output
            _obs, reward, terminated, _truncated, info = await env.step_async(env.noop_action)
            return {"terminated": terminated, "reward": reward, **info}
        finally:
            await env.close_async()

    info = asyncio.run(play())
    assert info["terminated"] and info["reward"] == 0
    assert info["patch"].startswith("diff --git a/README.rst b/README.rst")
    assert "conftest" not in info["patch"]
    assert info["report"]["python-semver__python-semver-426"]["resolved"] is False
