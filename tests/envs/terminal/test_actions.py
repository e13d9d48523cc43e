from __future__ import annotations

import pytest

from gymfleet.envs.terminal.actions import Command, Malformed, Submit, parse_action
from gymfleet.envs.actions import bash_block


@pytest.mark.parametrize("text", ["submit", "  Submit\n", "```submit\n```", "Done.\n```submit\n```"])
def test_submit(text: str) -> None:
    assert parse_action(text) == Submit()


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("```bash\nls -la\n```", "ls -la\n"),
        ("I will list.\n\n```sh\ncd a && ls\n```\nThanks", "cd a && ls\n"),
        ("~~~bash\necho '```'\n~~~", "echo '```'\n"),
        ("````bash\ncat <<'EOF'\n```\nEOF\n````", "cat <<'EOF'\n```\nEOF\n"),
        ("```bash\necho unclosed", "echo unclosed"),
    ],
)
def test_command(text: str, script: str) -> None:
    assert parse_action(text) == Command(script)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("ls -la", "No fenced code block"),
        ("", "No fenced code block"),
        ("```bash\nls\n```\n```bash\npwd\n```", "Found 2 code blocks"),
        ("```python\nprint(1)\n```", "tagged 'python'"),
        ("```\nls\n```", "untagged"),
        ("```bash\n\n```", "empty"),
    ],
)
def test_malformed(text: str, reason: str) -> None:
    parsed = parse_action(text)
    assert isinstance(parsed, Malformed) and reason in parsed.reason
    assert "```bash" in parsed.reason  # it tells the agent the format


def test_gold_block_survives_backticks_in_the_script() -> None:
    script = "cat > a.md <<'EOF'\n```python\nx\n```\nEOF\n"
    assert parse_action(bash_block(script)) == Command(script)
