"""The viewer's errors, under gymfleet's one tree (``gymfleet/core/errors.py``).

Class tree::

    GymfleetError
    └── ViewError                     the trajectory viewer cannot answer (gymfleet view)
        ├── NoStoreError (ConfigError) no store at the given URL or runs folder: names the fix
        ├── NotFoundError (KeyError)  no such run, group, trajectory or file (HTTP 404)
        └── ArtifactRefusedError      a file request outside the run's folders, or of a kind never
                                      served (HTTP 403)
"""

from __future__ import annotations

from gymfleet.core.errors import ConfigError, GymfleetError


class ViewError(GymfleetError):
    """The trajectory viewer cannot answer a request."""


class NoStoreError(ViewError, ConfigError):
    """No store where the command line pointed: the message names ``--store`` / ``--runs-dir``."""


class NotFoundError(ViewError, KeyError):
    """No such run, group, trajectory or file."""

    def __str__(self) -> str:  # KeyError quotes its message; people read this one
        return str(self.args[0]) if self.args else ""


class ArtifactRefusedError(ViewError):
    """A file request that names a path outside the run's folders (``../``, an absolute path, a
    symlink out) or a kind of file the viewer never serves."""
