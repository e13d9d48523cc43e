"""benchmarks/vs_trl_terminal.py's TRL rollouts: one long conversation does not pad the whole batch."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "vs_trl_terminal.py"


@pytest.fixture(scope="module")
def bench() -> Any:
    spec = importlib.util.spec_from_file_location("vs_trl_terminal", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recording_rollouts(bench: Any) -> Any:
    """TerminalRollouts whose model call records the rows it got (each reply: the row's first id)."""

    class Recording(bench.TerminalRollouts):
        def __init__(self) -> None:  # no envs, no tokenizer: only the chunking runs
            self.calls: list[list[int]] = []

        def _generate_chunk(self, model: Any, inputs: list[list[int]]) -> list[tuple[list[int], list[float], bool]]:
            self.calls.append([len(x) for x in inputs])
            return [(x[:1], [0.0], True) for x in inputs]

    return Recording()


def test_rows_that_fit_go_in_one_call_in_their_order(bench: Any) -> None:
    rollouts = recording_rollouts(bench)
    inputs = [[i] * n for i, n in enumerate([300, 250, 280])]
    assert [ids for ids, _, _ in rollouts._generate(None, inputs)] == [[0], [1], [2]]
    assert rollouts.calls == [[300, 250, 280]]


def test_a_long_conversation_is_generated_apart_and_replies_keep_their_rows(bench: Any) -> None:
    rollouts = recording_rollouts(bench)
    lengths = [300, 7000, 250, 280, 1200, 900] + [200] * 10
    replies = rollouts._generate(None, [[i] * n for i, n in enumerate(lengths)])
    assert [ids for ids, _, _ in replies] == [[i] for i in range(len(lengths))]
    assert all(len(call) * max(call) <= bench.GENERATE_TOKENS for call in rollouts.calls)
    assert sorted(n for call in rollouts.calls for n in call) == sorted(lengths)
    (long_call,) = [call for call in rollouts.calls if 7000 in call]
    assert len(rollouts.calls) > 1 and len(long_call) <= bench.GENERATE_TOKENS // 7000


def test_async_keeps_learning_past_the_equal_step_point_and_both_are_scored(bench: Any) -> None:
    import argparse

    args = argparse.Namespace(steps=9, async_steps=18, eval_every=4)
    assert bench._steps(args, "async") == 18 and bench._steps(args, "sync") == 9
    assert bench._eval_steps(args, 18) == [4, 8, 9, 12, 16, 18]  # step 9: async's equal-step point
    assert bench._eval_steps(args, 9) == [4, 8, 9]


def test_fewer_async_steps_than_steps_is_refused_in_one_line(bench: Any, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.argv", ["vs_trl_terminal.py", "--steps", "9", "--async-steps", "4"])
    assert bench.main() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--async-steps (4) must be at least --steps (9)" in err
