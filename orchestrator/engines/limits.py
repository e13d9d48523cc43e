"""ReplicaLimits: how long one call to one replica may take, owned in one place.

The router (``policy.router``, :class:`~gymfleet.orchestrator.router.RouterConfig`) holds these
values and enforces them around every call; an HTTP replica client
(:class:`~gymfleet.orchestrator.engines.vllm.VLLMEngine`) is built with the same object, so
that its own HTTP timeouts are the router's and never a second, different limit.
"""

from __future__ import annotations

from pydantic import Field

from gymfleet.core.strict import StrictModel


class ReplicaLimits(StrictModel):
    """Per-replica limits of one call, in seconds."""

    request_timeout_s: float = Field(default=300.0, gt=0)
    """Limit of one generate call on one replica; past it the request is retried elsewhere."""
    adapter_timeout_s: float = Field(default=120.0, gt=0)
    """Limit of one adapter load/unload on one replica (a copy to ``adapter_dir`` included);
    past it the broadcast fails."""
    health_timeout_s: float = Field(default=5.0, gt=0)
    """Limit of one health check; a replica that does not answer in time has failed that check."""


MOVED_TO_ROUTER = {"timeout_s": "request_timeout_s", "adapter_timeout_s": "adapter_timeout_s",
                   "health_timeout_s": "health_timeout_s"}
"""Engine keys of earlier configs, now ``policy.router`` keys (the router owns the limits)."""
