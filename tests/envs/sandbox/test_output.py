"""Head + tail output capture: exact below the limit, head, marker and tail above it."""

from __future__ import annotations

from pathlib import Path

from gymfleet.envs.sandbox.output import capture, capture_file


def test_small_output_is_kept_whole() -> None:
    assert capture(b"hello\n", 100) == ("hello\n", 6)
    assert capture(b"", 0) == ("", 0)


def test_large_output_keeps_head_and_tail_with_the_size() -> None:
    data = b"A" * 50 + b"B" * 1000 + b"C" * 51
    text, total = capture(data, 101)
    assert total == 1101
    head, marker, tail = text.split("\n", 2)[0], text.split("\n")[1], text.split("\n", 2)[2]
    assert head == "A" * 50 and tail == "C" * 51
    assert "1101 bytes in all" in marker and "1000 bytes omitted" in marker


def test_binary_bytes_are_replaced_not_raised() -> None:
    text, total = capture(b"\xff\xfeok\x00", 100)
    assert text == "\ufffd\ufffdok\x00" and total == 5


def test_capture_file_matches_capture(tmp_path: Path) -> None:
    data = bytes(range(256)) * 300
    path = tmp_path / "out"
    path.write_bytes(data)
    for limit in (0, 1, 1000, len(data), len(data) + 1):
        assert capture_file(path, limit) == capture(data, limit)
