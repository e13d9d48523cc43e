"""A sandbox's container: the run options a :class:`SandboxSpec` turns into, and its creation
with the errors named (missing image: build it; limits refused: lower them)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import uuid
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from gymfleet.envs.errors import SandboxStartError
from gymfleet.envs.sandbox.base import LABEL_HOST, LABEL_OWNER_PID, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker_exec import KEEPALIVE_ARGV


def container_options(spec: SandboxSpec, labels: SandboxLabels) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for a sandbox of ``spec``.

    The main process is ``sleep infinity`` under Docker's init (tini reaps the zombies agents'
    background jobs leave); the labels add the owner pid and host for the reaper.
    """
    name = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"gymfleet-{labels.run_id}-{labels.rollout_id}")[:100]
    return dict(
        command=KEEPALIVE_ARGV,
        init=True,
        name=f"{name}-{uuid.uuid4().hex[:6]}",
        labels=labels.as_dict() | {LABEL_OWNER_PID: str(os.getpid()), LABEL_HOST: socket.gethostname()},
        working_dir=spec.workdir,
        environment=spec.env,
        network_mode=None if spec.network else "none",
        nano_cpus=int(spec.cpus * 1e9),
        mem_limit=f"{spec.memory_mb}m",
        memswap_limit=f"{spec.memory_mb}m",
        pids_limit=spec.pids_limit,
        detach=True,
    )


def create_container(client: docker.DockerClient, spec: SandboxSpec, labels: SandboxLabels) -> Container:
    """Creates and starts the container of a sandbox (never pulls).

    Raises:
        SandboxStartError: the image is missing (the message says how to build it), or Docker
            refused the limits or failed to start it (nothing is left behind).
    """
    try:
        container = client.containers.create(spec.image, **container_options(spec, labels))
    except docker.errors.ImageNotFound as exc:
        raise SandboxStartError(f"image {spec.image} not found: {build_hint(spec.image)}") from exc
    except docker.errors.APIError as exc:
        raise SandboxStartError(
            f"Docker refused to create a sandbox of {spec.image} (check the spec's cpus, memory_mb, "
            f"pids_limit against this host): {exc}"
        ) from exc
    try:
        container.start()
    except docker.errors.APIError as exc:
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True)
        raise SandboxStartError(f"sandbox of {spec.image} did not start: {exc}") from exc
    return container


def build_hint(image: str) -> str:
    """How to get ``image``: gymfleet's own images are built, others pulled."""
    match = re.fullmatch(r"gymfleet/([\w.-]+)(?::[\w.-]+)?", image)
    if match:
        return f"build it with `gymfleet images build {match.group(1)}`"
    return f"pull or build it (`docker pull {image}`)"
