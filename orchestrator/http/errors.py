"""Errors of the HTTP gateway, each carrying the HTTP status a dialect answers with.

Class tree::

    GymfleetError                 (gymfleet/core/errors.py)
    └── WireError                 a request the gateway refuses; ``status`` is its HTTP status
        ├── BadRequestError       400: a malformed body (the message names the field)
        ├── UnknownSessionError   404: no open or closed session has this token
        ├── ClosedSessionError    409: the session was closed (its rollout ended)
        ├── TooLargeError         413: the body is over ``max_body_bytes``
        └── CallFailedError       502/504: the engine failed or the call ran past its deadline
                                  (the call is recorded as lost: the rollout is not trained on)

Each dialect turns a :class:`WireError` into its own error body (``error_body``).
"""

from __future__ import annotations

from gymfleet.core.errors import GymfleetError


class WireError(GymfleetError):
    """A request the HTTP gateway refuses; ``status`` is the HTTP status to answer with."""

    status = 500


class BadRequestError(WireError):
    """The body is not valid JSON or not a valid request of the dialect."""

    status = 400


class UnknownSessionError(WireError):
    """No session has the token in the URL."""

    status = 404


class ClosedSessionError(WireError):
    """The session's rollout ended; it takes no more calls."""

    status = 409


class TooLargeError(WireError):
    """The body is larger than the server accepts."""

    status = 413


class CallFailedError(WireError):
    """The engine failed (502) or the call ran past its deadline (504); the call is lost."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status
