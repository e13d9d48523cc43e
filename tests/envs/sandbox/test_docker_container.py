"""Container creation when many sandboxes start at once: the daemon's storage is learned once,
and the other creates do not wait on each other. A fake client stands in for the docker SDK's
(it records how many creates overlap)."""

from __future__ import annotations

import io
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker.errors
import pytest

from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker_container import FolderOwner, StorageFacts, container_options, create_container
from gymfleet.envs.sandbox.docker_exec import EXEC_ROOT

CREATE_S = 0.2  # what one create takes on the fake daemon


class FakeContainer:
    def __init__(self, container_id: str) -> None:
        self.id = container_id
        self.calls: list[tuple[str, Any]] = []

    def put_archive(self, path: str, data: bytes) -> bool:
        self.calls.append(("put_archive", (path, data)))
        return True

    def start(self) -> None:
        self.calls.append(("start", None))

    def remove(self, **_: Any) -> None:
        pass


class FakeClient:
    """``containers.create`` takes ``CREATE_S``; ``quota`` says whether ``storage_opt`` works."""

    def __init__(self, quota: bool) -> None:
        self.quota = quota
        self.containers = self
        self.api = self
        self.overlap = 0
        self.max_overlap = 0
        self.quota_tries = 0
        self.probes = 0
        self._lock = threading.Lock()
        self._n = 0

    def create(self, image: str, **options: Any) -> FakeContainer:
        with self._lock:
            self._n += 1
            n = self._n
            if "storage_opt" in options:
                self.quota_tries += 1
            self.overlap += 1
            self.max_overlap = max(self.max_overlap, self.overlap)
        try:
            time.sleep(CREATE_S)
            if "storage_opt" in options and not self.quota:
                raise docker.errors.APIError("--storage-opt is supported only for overlay over xfs with 'pquota'")
            return FakeContainer(f"c{n}")
        finally:
            with self._lock:
                self.overlap -= 1

    # the low-level API: the start time, and the probe of the image's workdir
    def inspect_container(self, container_id: str) -> dict[str, Any]:
        return {"State": {"StartedAt": "2026-12-02T08:00:00Z"}}

    def create_container(self, image: str, **_: Any) -> dict[str, str]:
        self.probes += 1
        return {"Id": "probe"}

    def get_archive(self, container_id: str, path: str) -> Any:
        raise docker.errors.NotFound("no such folder")

    def remove_container(self, container_id: str, **_: Any) -> None:
        pass


@pytest.mark.parametrize("quota", [True, False], ids=["quota", "tmpfs-volumes"])
def test_many_starts_at_once_learn_the_storage_once_and_create_in_parallel(quota: bool) -> None:
    client, facts = FakeClient(quota), StorageFacts()
    spec = SandboxSpec(image="gymfleet/base:test")

    def start(i: int) -> str:
        container, started_at = create_container(client, spec, SandboxLabels(run_id="r", rollout_id=f"r{i}"), facts)
        assert started_at
        return container.id

    n = 8
    with ThreadPoolExecutor(n) as pool:
        ids = list(pool.map(start, range(n)))
    assert len(set(ids)) == n
    assert facts.quota is quota
    assert client.quota_tries == (n if quota else 1)  # tried once, not by each sandbox
    assert client.probes == (0 if quota else 1)  # the workdir probed once per image
    # Before: every create of the first burst ran inside the lock, one at a time (overlap 1).
    assert client.max_overlap >= n // 2, client.max_overlap


def test_the_exec_folder_is_usable_by_an_image_s_non_root_user() -> None:
    # an image with USER nobody could run no command: mkdir /run/gymfleet-exec/<id> was refused
    spec = SandboxSpec(image="gymfleet/base:test")
    options = container_options(spec, SandboxLabels(run_id="t"), quota=False, tmpfs_workdir=False)
    volume = next(m for m in options["mounts"] if m["Target"] == EXEC_ROOT)
    assert "mode=1777" in volume["VolumeOptions"]["DriverConfig"]["Options"]["o"]
    # with a quota the folder is on the container's layer: made 1777 (like /tmp) before the start
    container, _ = create_container(FakeClient(quota=True), spec, SandboxLabels(run_id="t"), StorageFacts())  # type: ignore[arg-type]
    assert [c[0] for c in container.calls] == ["put_archive", "start"]  # type: ignore[attr-defined]
    path, data = container.calls[0][1]  # type: ignore[attr-defined]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        (member,) = tar.getmembers()
    assert (path, member.name, member.isdir(), member.mode, member.uid) == ("/", EXEC_ROOT.lstrip("/"), True, 0o1777, 0)


def test_an_empty_workdir_s_volume_keeps_the_image_s_owner_and_mode() -> None:
    spec = SandboxSpec(image="gymfleet/base:test", workdir="/work/")
    owner = FolderOwner(uid=65534, gid=65534, mode=0o750)
    options = container_options(spec, SandboxLabels(run_id="t"), quota=False, tmpfs_workdir=True, workdir_owner=owner)
    o = {m["Target"]: m["VolumeOptions"]["DriverConfig"]["Options"]["o"] for m in options["mounts"]}
    assert o["/work"].endswith("mode=750,uid=65534,gid=65534") and o["/tmp"].endswith("mode=1777,uid=0,gid=0")
