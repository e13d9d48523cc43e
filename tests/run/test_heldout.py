"""Held-out evaluation: the pass@1 standard error, the report's ``evaluation`` section and PNG, the
held-out instances kept out of training, the one-line reason a run learned nothing, and
``gymfleet eval heldout`` on the echo config (scripted gateway: no model)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator.envfactory import resolve_instances
from gymfleet.run.config import load_train_config
from gymfleet.run.heldout import HeldOutEvaluation, PolicySource, evaluate_heldout, run_policies
from gymfleet.run.config import BudgetConfig
from gymfleet.run.records import AdapterLoadFailure, Gain, GenerationTimeline, PassRate, TrainReport, binomial_se
from gymfleet.run.report import build_report, write_report
from gymfleet.run.verdict import no_learning_reason, require_learning_failure
from gymfleet.trainer import AdapterBucket
from tests.e2e.train_helpers import tiny_train_config
from tests.orchestrator.fakes import SlowEchoEnv

HELDOUT = {"enabled": True, "instances": {"echo": ["w006", "w007"]}, "samples_per_instance": 2}


def test_binomial_standard_error() -> None:
    assert binomial_se(0.25, 8) == pytest.approx(math.sqrt(0.25 * 0.75 / 8))  # 0.153
    assert binomial_se(0.0, 8) == 0.0 and binomial_se(1.0, 3) == 0.0 and math.isnan(binomial_se(0.0, 0))
    score = PassRate.from_rewards([1.0, 0.5, 0.0, 1.0], threshold=1.0)
    assert (score.pass_at_1, score.n, score.n_passed, score.mean_reward) == (0.5, 4, 2, 0.625)
    assert score.se == pytest.approx(0.25) and score.describe() == "0.500 ± 0.250 (n=4)"
    assert PassRate.from_rewards([0.5], threshold=0.5).pass_at_1 == 1.0


def _evaluation() -> HeldOutEvaluation:
    out = HeldOutEvaluation(1.0, 2, 0, {"echo": ["w006", "w007"], "coin": ["w000"]},
                            [PolicySource("base"), PolicySource("warm_start", "/a/v1", 1), PolicySource("final", "/a/v3", 3)])
    out.scores = {"echo": {"base": PassRate.from_rewards([0, 0, 1, 0], 1.0),
                           "warm_start": PassRate.from_rewards([1, 0, 1, 0], 1.0),
                           "final": PassRate.from_rewards([1, 1, 1, 0], 1.0)},
                  "coin": {"base": PassRate.from_rewards([1, 0], 1.0), "final": PassRate.from_rewards([1, 0], 1.0)}}
    return out


def test_report_section_and_plot_from_fake_results(tmp_path: Path) -> None:
    report = build_report(tmp_path, "async", GenerationTimeline(started_at=time.time()), "r",
                          evaluation=_evaluation().section())
    path = write_report(tmp_path, report)
    section = json.loads(path.read_text())["evaluation"]
    final = section["by_family"]["echo"]["final"]
    assert final == {"pass_at_1": 0.75, "n": 4, "se": pytest.approx(math.sqrt(0.75 * 0.25 / 4)),
                     "mean_reward": 0.75, "n_passed": 3}
    assert set(section["by_family"]["coin"]) == {"base", "final"} and "reward >= 1.0" in section["metric"]
    assert (tmp_path / "heldout.png").stat().st_size > 1000
    assert _evaluation().lines()[0] == ("echo: base 0.250 ± 0.217 (n=4), warm_start 0.500 ± 0.250 (n=4), "
                                        "final 0.750 ± 0.217 (n=4); warm start vs base +0.250 ± 0.331 (0.8 SE); "
                                        "final vs warm start +0.250 ± 0.331 (0.8 SE)")
    gains = section["gains"]
    assert set(gains["echo"]) == {"warm_start_vs_base", "final_vs_warm_start", "final_vs_base"}
    assert gains["echo"]["final_vs_base"] == {"delta": 0.5, "se": pytest.approx(math.sqrt(2 * 0.75 * 0.25 / 4)),
                                              "z": pytest.approx(1.633, abs=1e-3), "meets": False,
                                              "n_paired": 0, "se_paired": None, "z_paired": None,
                                              "meets_paired": None}  # no outcomes given: unpaired only
    assert set(gains["coin"]) == {"final_vs_base"} and gains["coin"]["final_vs_base"]["meets"] is False


@pytest.mark.parametrize(("after", "before", "z", "meets"), [
    ([1] * 32, [1] * 26 + [0] * 6, 2.7174, True),   # 1.000 vs 0.8125 (n=32): the MiniWoB gain of a default run
    ([1] * 16 + [0] * 16, [1] * 12 + [0] * 20, 1.0160, False),  # 0.500 vs 0.375: not two SE
    ([1] * 4, [0] * 4, None, True),                 # 0 -> 1: both se 0, the gain is exact
    ([0, 1], [0, 1], 0.0, False),
    ([0] * 4, [1] * 4, None, False),
])
def test_a_gain_is_counted_in_standard_errors_of_the_difference(after: list, before: list, z: float | None,
                                                                meets: bool) -> None:
    gain = Gain.between(PassRate.from_rewards(after, 1.0), PassRate.from_rewards(before, 1.0))
    assert (gain.z is None if z is None else gain.z == pytest.approx(z, abs=1e-4)) and gain.meets is meets
    assert json.loads(json.dumps(asdict(gain), allow_nan=False))["meets"] is meets  # strict JSON


def test_require_learning_compares_the_final_adapter_with_the_base() -> None:
    report = TrainReport("r", "async", n_steps=3, evaluation=_evaluation().section())
    assert require_learning_failure(report) is None  # pooled 4/6 > 2/6
    assert report.evaluation is not None
    report.evaluation.by_family["echo"]["final"] = report.evaluation.by_family["echo"]["base"]
    failed = require_learning_failure(report)
    assert failed is not None and failed.startswith("the final adapter's held-out pass@1 0.333 does not exceed")


@pytest.mark.parametrize(("fields", "start"), [
    ({"zero_variance_groups": 6}, "no learner step: every claimed group had zero reward variance (6 groups)"),
    ({"budget": BudgetConfig(max_wall_s=30)}, "no learner step: generation produced no complete group in max_wall_s (30 s)"),
    ({"learner_exitcode": -9}, "no learner step: the learner process died (exit code -9"),
    ({"adapter_load_failures": [AdapterLoadFailure(0.0, 2, 3, "refused")]}, "no learner step: the engines loaded no adapter"),
    ({"learner_device": None}, "no learner step: the learner was not up yet"),
])
def test_a_run_that_trained_nothing_says_why(fields: dict, start: str) -> None:
    report = TrainReport("r", "async", **({"learner_device": "cpu"} | fields))
    assert (no_learning_reason(report) or "").startswith(start)
    assert require_learning_failure(report) == no_learning_reason(report)
    assert no_learning_reason(TrainReport("r", "async", n_steps=1)) is None


async def test_the_heldout_instances_are_never_trained_on(tmp_path: Path) -> None:
    cfg = load_train_config(tiny_train_config(tmp_path, "held", heldout=HELDOUT))
    task = cfg.run.tasks[0]
    assert task.exclude_instances == ["w006", "w007"]
    trained = await resolve_instances(task, lambda: SlowEchoEnv(8))
    assert trained == ["w000", "w001", "w002", "w003", "w004", "w005"]
    capped = await resolve_instances(task.model_copy(update={"max_instances": 7}), lambda: SlowEchoEnv(8))
    assert "w006" not in capped and "w007" not in capped


def test_heldout_config_errors_name_the_fix(tmp_path: Path) -> None:
    overlap = tiny_train_config(tmp_path, "overlap", heldout=HELDOUT)
    with pytest.raises(ConfigError, match=r"remove them from tasks\[echo\].instances or from heldout.instances.echo"):
        load_train_config(overlap, ["tasks.0.instances=[w000,w007]"])
    with pytest.raises(ConfigError, match="names task 'nope', which the run does not have"):
        load_train_config(overlap, ["heldout.instances={nope: [w000]}"])
    with pytest.raises(ConfigError, match="heldout"):
        load_train_config(overlap, ["heldout.sample_per_instance=2"])  # strict: a typo is refused


def test_eval_heldout_cli_prints_pass_at_1_with_its_standard_error(tmp_path: Path) -> None:
    config = tiny_train_config(tmp_path, "evalcli", heldout=HELDOUT,
                               policy={"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"})
    adapter = tmp_path / "my-adapter"
    adapter.mkdir()
    done = CliRunner().invoke(app, ["eval", "heldout", str(config), "--adapter", str(adapter)])
    assert done.exit_code == 0, done.output
    assert "held-out pass@1 of my-adapter (a rollout passes when its reward >= 1" in done.output
    assert "echo: pass@1 1.000 ± 0.000 (n=4), mean reward 1.000" in done.output
    missing = CliRunner().invoke(app, ["eval", "heldout", str(config), "--adapter", "v7"])
    assert missing.exit_code == 2 and "it holds none published yet" in " ".join(missing.output.split())


def test_the_default_config_holds_out_instances_it_never_trains_on() -> None:
    cfg = load_train_config(Path(__file__).resolve().parents[2] / "configs" / "train-default.yaml")
    assert cfg.heldout.enabled and cfg.heldout.instances
    tasks = {t.name: t for t in cfg.run.tasks}
    for family, ids in cfg.heldout.instances.items():
        assert set(ids) <= set(tasks[family].exclude_instances)
        assert not set(ids) & set(tasks[family].instances or [])
        assert len(ids) * cfg.heldout.samples_per_instance >= 32, "n per family below 32: the SE is too wide"


def test_the_default_config_trains_and_holds_out_several_miniwob_tasks() -> None:
    """Issue 47: the browser family is several MiniWoB tasks (click-test-2 alone saturated the warm
    start), each trained on some page seeds and held out on others, and the warm start's first
    ``max_instances_per_task`` demonstrations cover every one of them."""
    cfg = load_train_config(Path(__file__).resolve().parents[2] / "configs" / "train-default.yaml")
    miniwob = next(t for t in cfg.run.tasks if t.name == "miniwob")

    def by_task(ids: list[str]) -> dict[str, set[int]]:
        seeds: dict[str, set[int]] = {}
        for i in ids:
            name, _, seed = i.partition("@")
            seeds.setdefault(name, set()).add(int(seed))
        return seeds

    trained, held = by_task(miniwob.instances or []), by_task(cfg.heldout.instances["miniwob"])
    assert len(trained) >= 3 and "click-test-2" not in trained
    assert set(held) == set(trained)
    assert all(not trained[t] & held[t] for t in trained), "a held-out page seed is trained on"
    warm = (miniwob.instances or [])[:cfg.warmstart.max_instances_per_task]
    assert set(by_task(warm)) == set(trained), "the warm start leaves a MiniWoB task out"


async def test_the_default_config_resolves_its_instances() -> None:
    """The easy tier's ids and MiniWoB's seeded ids are accepted; every held-out one stays out."""
    from gymfleet.envs.terminal.easy import heldout_ids
    from gymfleet.orchestrator.envfactory import env_factory, resolve_instances

    cfg = load_train_config(Path(__file__).resolve().parents[2] / "configs" / "train-default.yaml")
    held = cfg.heldout.instances["terminal"]
    assert set(held) <= set(heldout_ids())
    assert {i.rsplit("-", 1)[0] for i in held} == {i.rsplit("-", 1)[0] for t in cfg.run.tasks
                                                    if t.name == "terminal" for i in t.instances}, \
        "the held-out terminal templates are the trained ones"
    for task in cfg.run.tasks:
        ids = await resolve_instances(task, env_factory(task))
        assert ids and not set(ids) & set(cfg.heldout.instances[task.name])


def test_the_policies_of_a_run_are_base_warm_start_and_newest(tmp_path: Path) -> None:
    bucket = AdapterBucket(str(tmp_path / "bucket"), "r")
    assert run_policies(bucket, tmp_path / "fetched") == [PolicySource("base")]
    files = tmp_path / "adapter"
    files.mkdir()
    (files / "adapter_config.json").write_text("{}")
    bucket.publish(1, files, {"warm_start": {"epoch_losses": [1.0]}})
    bucket.publish(2, files, {"step": 1})
    base, warm, final = run_policies(bucket, tmp_path / "fetched")
    assert (base.name, warm.name, warm.version, final.name, final.version) == ("base", "warm_start", 1, "final", 2)
    assert Path(final.adapter, "adapter_config.json").is_file()


def test_the_paired_standard_error_is_over_per_rollout_differences() -> None:
    after, before = [1, 1, 1, 0], [1, 0, 1, 0]   # d = 0, 1, 0, 0: mean 0.25, sample sd 0.5, se 0.25
    ids = [f"r{i}" for i in range(4)]
    gain = Gain.between(PassRate.from_rewards(after, 1.0), PassRate.from_rewards(before, 1.0),
                        (dict(zip(ids, map(bool, after))), dict(zip(ids, map(bool, before)))))
    assert (gain.n_paired, gain.se_paired, gain.z_paired, gain.meets_paired) == (4, pytest.approx(0.25), pytest.approx(1.0), False)
    assert gain.describe() == "+0.250 ± 0.331 (0.8 SE; paired 1.0 SE)"
    every = {i: True for i in ids}
    never = {i: False for i in ids} | {"only-before": False}  # a rollout one policy lacks is left out
    exact = Gain.between(PassRate.from_rewards([1] * 4, 1.0), PassRate.from_rewards([0] * 5, 1.0), (every, never))
    assert (exact.n_paired, exact.se_paired, exact.z_paired, exact.meets_paired) == (4, 0.0, None, True)
    assert Gain.between(PassRate.from_rewards(after, 1.0), PassRate.from_rewards(before, 1.0)).n_paired == 0


async def test_policies_evaluated_on_the_same_instances_share_rollout_ids(tmp_path: Path) -> None:
    cfg = load_train_config(tiny_train_config(tmp_path, "paired", heldout=HELDOUT,
                                              policy={"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"}))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    out = await evaluate_heldout(cfg, [PolicySource("base"), PolicySource("final", str(adapter), 2)], tmp_path / "held")
    passed = out.passed["echo"]
    assert set(passed["base"]) == set(passed["final"]) and len(passed["base"]) == 4  # 2 instances x 2 samples
    gain = out.gains()["echo"]["final_vs_base"]
    assert gain.n_paired == 4 and gain.delta == 0.0 and gain.meets_paired is False
