"""Appends run metrics to a JSONL file, one snapshot a line, flushed as written."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from gymfleet.core.jsonl import open_for_append


class MetricsWriter:
    """Appends JSON lines to ``path`` (created with its folder); a context manager.

    Args:
        path: the JSONL file; a restarted run appends to the same file, after cutting off a torn
            last line the previous start left (:func:`gymfleet.core.jsonl.repair_torn_tail`).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = None

    def __enter__(self) -> Self:
        self._file = open_for_append(self.path)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, event: str, payload: dict[str, Any]) -> None:
        """Writes ``{"event": event, **payload}`` as one line.

        Raises:
            OSError: the line could not be written (disk full, read-only), with the file's name;
                the writer is closed then (what it could not write is dropped, not retried at exit).
        """
        if self._file is None:
            raise RuntimeError("MetricsWriter is not open: use it as a context manager")
        try:
            self._file.write(json.dumps({"event": event, **payload}, default=str) + "\n")
            self._file.flush()
        except OSError as exc:
            with contextlib.suppress(OSError):  # the unwritten buffer would fail again on close
                self._file.close()
            self._file = None
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
