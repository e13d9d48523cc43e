"""How a command-line agent's ending is classified (``envs/harness/cli_run.py``'s table): a crash
after a model call was answered is the policy's doing (graded and trained on), before it the agent's."""

from __future__ import annotations

import socket

import pytest

from gymfleet.envs.harness.cli_agents import CliAgentConfig
from gymfleet.envs.harness.cli_run import classify
from gymfleet.envs.harness.session_proxy import SessionProxy
from gymfleet.envs.sandbox.base import ExecResult


def ended(exit_code: int, timed_out: bool = False) -> ExecResult:
    return ExecResult(exit_code=exit_code, stdout="", stderr="Terminated\n", duration_s=3.0, timed_out=timed_out)


@pytest.fixture
def proxy() -> SessionProxy:
    with socket.socket() as sock:
        yield SessionProxy(sock, "http://127.0.0.1:1/s/token")


@pytest.mark.parametrize(("answered", "refused", "status"), [
    (1, [], "ok"),                       # e.g. the policy ran `pkill codex`: its doing, graded, trained on
    (0, [], "infra_error"),              # crashed before the policy said anything
    (0, ["POST /s/x: 404"], "infra_error"),  # only a refused call (another session's URL)
])
def test_a_crash_is_the_policys_once_a_call_was_answered(
        proxy: SessionProxy, answered: int, refused: list[str], status: str) -> None:
    proxy.answered, proxy.calls, proxy.refused = answered, answered + len(refused), refused
    got, reason = classify(ended(137), 0, CliAgentConfig(), proxy)
    assert (got, reason.split(":")[0]) == (status, "the agent exited 137")


def test_the_deadline_comes_before_the_exit_code(proxy: SessionProxy) -> None:
    assert classify(ended(137, timed_out=True), 0, CliAgentConfig(), proxy)[0] == "truncated"
    assert classify(ended(0), 0, CliAgentConfig(), proxy) == ("ok", "")


def test_claude_code_runs_with_gymfleets_short_defaults_unless_told() -> None:
    from gymfleet.envs.harness.cli_agents import BUILTIN, CLAUDE_CODE, CLAUDE_INSTRUCTIONS

    line = CLAUDE_CODE.launch(CliAgentConfig(max_turns=7))
    assert "IS_SANDBOX=1" in line and "ANTHROPIC_BASE_URL=http://127.0.0.1:47113" in line
    assert "--max-turns 7" in line and "--tools Bash" in line and "--setting-sources ''" in line
    assert "--permission-mode bypassPermissions" in line and CLAUDE_INSTRUCTIONS.split(".")[0] in line
    own = CLAUDE_CODE.launch(CliAgentConfig(instructions=BUILTIN, tools=["default"], permission_mode="dontAsk"))
    assert "--system-prompt" not in own and "--tools default" in own and "--permission-mode dontAsk" in own
    assert '"defaultMode": "dontAsk"' in CLAUDE_CODE.settings(CliAgentConfig(permission_mode="dontAsk"))["settings.json"]


def test_tools_is_claude_codes_setting_only() -> None:
    from gymfleet.envs.harness.env import HarnessEnv

    with pytest.raises(ValueError, match="Claude Code's --tools"):
        HarnessEnv(harness="codex", task_kwargs={"sandbox": "docker"}, agent={"tools": ["Bash"]})
