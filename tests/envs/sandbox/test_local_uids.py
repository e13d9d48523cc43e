"""Uids lent to local sandboxes: one per holder, back when released, a clear error when out."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.envs.errors import SandboxStartError
from gymfleet.envs.sandbox.local_uids import lease_uid


def test_leases_are_distinct_reused_and_bounded(tmp_path: Path) -> None:
    first = lease_uid(tmp_path, 300_000, 2)
    second = lease_uid(tmp_path, 300_000, 2)
    assert {first.uid, second.uid} == {300_000, 300_001}
    with pytest.raises(SandboxStartError, match="n_uids"):
        lease_uid(tmp_path, 300_000, 2)
    first.release()
    first.release()
    assert lease_uid(tmp_path, 300_000, 2).uid == 300_000
