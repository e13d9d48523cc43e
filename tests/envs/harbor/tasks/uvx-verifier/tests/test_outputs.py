from pathlib import Path


def test_answer() -> None:
    assert Path("/app/answer.txt").read_text().strip() == "42"
