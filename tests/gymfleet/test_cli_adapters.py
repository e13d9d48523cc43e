"""`gymfleet adapters list|export`: the run found in the runs folder, the held-out section of its
report and the tasks it was trained on in the card, the base it was trained on carried in base/,
`latest` as a version; bad input (a missing version lists those that exist) and an unreachable
hub are one line and exit 2. (The reload of an export by peft alone is tests/trainer/test_model_card.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.core.models import EMBEDDED_HUB_ID
from gymfleet.trainer import AdapterBucket, LearnerConfig, RolloutPolicy

runner = CliRunner()


def _publish_old_style(runs: Path, run_id: str) -> None:
    """A version as publishes before model cards wrote it: base = a local cache folder, no README."""
    files = runs.parent / f"files-{run_id}"
    files.mkdir(exist_ok=True)
    (files / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/root/.cache/x", "r": 2}))
    (files / "adapter_model.safetensors").write_bytes(b"weights")
    (files / "learner_state.safetensors").write_bytes(b"state")
    AdapterBucket(str(runs / run_id / "bucket"), run_id).publish(
        1, files, {"step": 4, "config": LearnerConfig().model_dump(mode="json"),
                   "policy": RolloutPolicy().model_dump(mode="json"), "recent_rewards": {"4": 0.5}})


def test_export_finds_the_run_and_writes_a_plain_peft_folder_with_its_card(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _publish_old_style(runs, "r1")
    (runs / "r1" / "report").mkdir()
    (runs / "r1" / "report" / "report.json").write_text(json.dumps({"evaluation": {
        "policies": [{"name": "final", "version": 1}],
        "by_family": {"echo": {"final": {"pass_at_1": 0.5, "se": 0.1, "n": 4}}}, "gains": {}}}))
    result = runner.invoke(app, ["adapters", "export", "latest", str(tmp_path / "out"), "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    assert "exported v1 of run r1" in result.output and "with the base it was trained on in base/" in result.output
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors", "base"]
    # the de-quantised weights the run trained on (the hub's differ), named by the config
    assert (out / "base" / "model.safetensors").stat().st_size > 100e6 and (out / "base" / "tokenizer.json").is_file()
    # readable where it is shared (before: the weights were linked from the cache with mode 0600)
    assert all(p.stat().st_mode & 0o444 == 0o444 for p in (out / "base").iterdir())
    config = json.loads((out / "adapter_config.json").read_text())
    assert config == {"base_model_name_or_path": "base", "r": 2}
    card = (out / "README.md").read_text()
    assert "learner step: 4" in card and "| 4 | 0.500 |" in card and "| echo | final | 0.500 | 0.100 | 4 |" in card
    assert f"base_model: {EMBEDDED_HUB_ID}" in card and "## Base model" in card and "Q4_1" in card
    assert 'from_pretrained(folder / "base")' in card
    # --no-with-base: the hub id only
    result = runner.invoke(app, ["adapters", "export", "1", str(tmp_path / "hub"), "--runs-dir", str(runs),
                                 "--no-with-base"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "hub" / "adapter_config.json").read_text())["base_model_name_or_path"] == EMBEDDED_HUB_ID


def test_list_shows_every_version_and_json_is_pure(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _publish_old_style(runs, "r1")
    result = runner.invoke(app, ["adapters", "list", "--runs-dir", str(runs), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # nothing but the document
    assert doc["run_id"] == "r1" and [(v["version"], v["step"], v["mean_reward"], v["made_by"])
                                      for v in doc["versions"]] == [(1, 4, 0.5, "GRPO")]
    result = runner.invoke(app, ["adapters", "list", "--runs-dir", str(runs)])
    assert result.exit_code == 0 and "v1" in result.stdout and "GRPO" in result.stdout, result.output


def test_bad_input_and_an_unreachable_hub_are_one_line_and_exit_2(tmp_path: Path, monkeypatch) -> None:
    runs = tmp_path / "runs"
    _publish_old_style(runs, "r1")
    _publish_old_style(runs, "r2")
    cases = [
        (["v1", str(tmp_path / "a")], "holds 2 runs with adapters (r1, r2): pass --run RUN_ID"),
        (["vx", str(tmp_path / "a"), "--run", "r1"], "write v3, 3, v000003 or latest"),
        (["v9", str(tmp_path / "a"), "--run", "r1"], "version v9 is not in the bucket"),
        (["v9", str(tmp_path / "a"), "--run", "r1"], "of run r1: it holds v1"),
    ]
    for args, message in cases:
        result = runner.invoke(app, ["adapters", "export", *args, "--runs-dir", str(runs)])
        text = " ".join(result.output.split())  # rich folds long lines
        assert result.exit_code == 2 and message in text and "Traceback" not in text, result.output
    # no network here: the export is written, the push fails in one line
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = runner.invoke(app, ["adapters", "export", "v1", str(tmp_path / "b"), "--run", "r2",
                                 "--runs-dir", str(runs), "--push", "someone/adapter"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "could not push" in text and "someone/adapter" in text and "Traceback" not in text
    assert (tmp_path / "b" / "adapter_config.json").is_file()


def test_a_mistyped_run_id_leaves_nothing_behind(tmp_path: Path) -> None:
    """`--run nosuch` used to create runs/nosuch/bucket/nosuch/adapters/, after which a plain
    export found two runs and asked for --run."""
    runs = tmp_path / "runs"
    _publish_old_style(runs, "r1")
    result = runner.invoke(app, ["adapters", "export", "v1", str(tmp_path / "a"), "--run", "nosuch",
                                 "--runs-dir", str(runs)])
    assert result.exit_code == 2 and "of run nosuch: it holds none published yet" in " ".join(result.output.split()), result.output
    assert sorted(p.name for p in runs.iterdir()) == ["r1"]
    result = runner.invoke(app, ["adapters", "export", "v1", str(tmp_path / "b"), "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output


def test_the_card_lists_the_warm_starts_demonstrations_too(tmp_path: Path) -> None:
    # Issue 41's trial: a warm-started run's card listed only the GRPO groups' instances, not the
    # 16 demonstrations v1 was trained on.
    import asyncio

    from gymfleet.core.records import RolloutStatus
    from gymfleet.orchestrator.store import GroupSpec, TrajectoryStore
    from tests.orchestrator.store.conftest import make_trajectory

    runs = tmp_path / "runs"
    _publish_old_style(runs, "r2")
    meta = (runs / "r2" / "bucket" / "r2" / "adapters" / "v000001" / "meta.json")
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "demonstrations_run_id": "r2.demos"}))

    async def fill() -> None:
        async with await TrajectoryStore.open(str(runs / "r2" / "store.db")) as store:
            await store.start_run("r2.demos", {})
            for instance, reward in (("solved-1", 1.0), ("failed-1", 0.0)):
                group = GroupSpec(f"r2.demos/{instance}", "r2.demos", "echo", "gymfleet-test/Echo-v0", instance, 1)
                await store.create_group(group)
                traj = make_trajectory("r2.demos", group.group_id, 0, reward=reward)
                traj.status, traj.metrics = RolloutStatus.truncated, {"demonstration": True}
                await store.add(traj, task="echo")

    asyncio.run(fill())
    result = runner.invoke(app, ["adapters", "export", "v1", str(tmp_path / "out"), "--runs-dir", str(runs),
                                 "--no-with-base"])
    assert result.exit_code == 0, result.output
    card = (tmp_path / "out" / "README.md").read_text()
    assert "| echo (warm start) | `gymfleet-test/Echo-v0` | `solved-1` (1) |" in card, card
