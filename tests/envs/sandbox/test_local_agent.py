"""Parts of the in-sandbox agent that need no sandbox: output trimming."""

from __future__ import annotations

import os
from pathlib import Path

from gymfleet.envs.sandbox import local_agent
from gymfleet.envs.sandbox.output import capture, capture_file


def test_trimmer_frees_the_middle_and_keeps_head_tail_and_size(tmp_path: Path) -> None:
    data = os.urandom(1 << 20) * 48  # 48 MiB
    path = tmp_path / "out"
    path.write_bytes(data)
    with path.open("rb+") as f:
        local_agent.Trimmer(f.fileno(), keep_bytes=64 * 1024).trim()
    st = path.stat()
    assert st.st_size == len(data)
    assert st.st_blocks * 512 < 20 << 20, "the middle should have been freed"
    assert capture_file(path, 64 * 1024) == capture(data, 64 * 1024)
