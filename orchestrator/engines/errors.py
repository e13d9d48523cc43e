"""Errors of the inference layer: engines, the router over replicas, the TITO gateway.

Class tree (under :class:`gymfleet.core.errors.GymfleetError`; the whole tree is drawn in
``gymfleet/core/errors.py``)::

    InferenceError                    = gymfleet.core.errors.InferenceError
    ├── RequestError                  the request itself is bad: retrying elsewhere cannot help
    │   ├── ContextLengthError        prompt (plus at least one new token) exceeds the context window
    │   └── UnknownAdapterError       the request names an adapter the replica has not loaded
    ├── ReplicaError                  the replica failed: the router retries once on another replica
    │   ├── ReplicaUnavailableError   connection refused/reset, replica marked dead
    │   ├── ReplicaTimeoutError       no answer within the timeout (a hanging replica)
    │   └── ReplicaServerError        HTTP 5xx or a malformed answer
    ├── NoReplicaError                no live replica is left to serve a request
    ├── AdapterError                  loading or unloading an adapter failed on one replica
    ├── AdapterPublishError           a broadcast failed somewhere and was rolled back: not published
    ├── ChatTemplateError             the chat template breaks the TITO prefix property
    ├── ReplicaLaunchError            a vLLM server could not be started (exited, or not healthy in time)
    │   └── VLLMNotInstalledError     no vLLM installation where gymfleet looks for one
    └── ParityError                   a replica's logprobs disagree with the learner's beyond the bound
"""

from __future__ import annotations

from gymfleet.core.errors import InferenceError

__all__ = [
    "AdapterError", "AdapterPublishError", "ChatTemplateError", "ContextLengthError",
    "NoReplicaError", "ParityError", "ReplicaError", "ReplicaLaunchError", "ReplicaServerError", "ReplicaTimeoutError",
    "ReplicaUnavailableError", "RequestError", "UnknownAdapterError", "VLLMNotInstalledError",
]


class RequestError(InferenceError):
    """The request is invalid for every replica; it is not retried."""


class ContextLengthError(RequestError):
    """The prompt does not fit in the model's context window."""


class UnknownAdapterError(RequestError):
    """The request names an adapter that is not loaded."""


class ReplicaError(InferenceError):
    """A replica failed to answer; the request may succeed on another replica."""


class ReplicaUnavailableError(ReplicaError):
    """The replica could not be reached (refused or reset connection)."""


class ReplicaTimeoutError(ReplicaError):
    """The replica did not answer within the timeout."""


class ReplicaServerError(ReplicaError):
    """The replica answered with HTTP 5xx or with a body that does not parse."""


class NoReplicaError(InferenceError):
    """No live replica is left."""


class AdapterError(InferenceError):
    """Loading or unloading an adapter failed on one replica."""


class AdapterPublishError(InferenceError):
    """An adapter broadcast failed on at least one replica; it was unloaded everywhere."""


class ChatTemplateError(InferenceError):
    """The chat template re-renders earlier turns, so token ids could not be appended exactly."""


class ReplicaLaunchError(InferenceError):
    """A replica server could not be started: it exited during start-up or never became healthy."""


class VLLMNotInstalledError(ReplicaLaunchError):
    """No Python with vLLM where gymfleet looks (``GYMFLEET_VLLM_PYTHON``, then ``.venv-vllm``)."""


class ParityError(InferenceError):
    """At start-up, a replica's logprobs of its own probe generation differ from the learner's
    ``token_logprobs`` of the same tokens by more than the configured bound."""
