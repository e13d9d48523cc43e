"""Which Python versions SWE images can have offline, and the parent image carrying each.

A spec names a Python minor version (``"3.9"``); an instance gets the parent image of that
version (``images/swe-py39`` for 3.9 from Debian bullseye, ``images/swe`` for 3.11 from
bookworm, ``images/swe-py313`` for 3.13 from trixie). A version no reachable source carries (3.6,
3.7, 3.8, 3.10, 3.12 here: the Debian mirror answers bullseye, bookworm and trixie only, and the
npm "portable Python" packages download their binaries from GitHub at install time) fails
before any clone, with the options; ``fallback="nearest"`` takes the nearest newer reachable
version instead and says so on the report (``python_fallback: "3.8->3.9"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gymfleet.envs.swe.errors import UnsupportedPythonError

PYTHON_IMAGES: dict[str, str] = {"3.9": "swe-py39", "3.11": "swe", "3.13": "swe-py313"}
"""Python minor version -> folder under ``images/`` of the SWE parent that carries it."""

Fallback = Literal["none", "nearest"]


@dataclass(frozen=True)
class PythonChoice:
    """The Python an instance runs on.

    Attributes:
        wanted: the version the spec asks for.
        version: the version it gets.
        image: the ``images/`` folder of the parent image carrying ``version``.
    """

    wanted: str
    version: str
    image: str

    @property
    def fallback(self) -> str | None:
        """``"3.8->3.9"`` when another version than the spec's is used, else None."""
        return None if self.wanted == self.version else f"{self.wanted}->{self.version}"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


def choose_python(wanted: str, fallback: Fallback = "none",
                  images: dict[str, str] | None = None) -> PythonChoice:
    """The parent image for a spec asking for Python ``wanted``.

    Args:
        wanted: the spec's ``python`` (``"3.9"``; a patch level such as ``"3.9.7"`` is cut).
        fallback: ``"nearest"`` takes the nearest newer reachable version when ``wanted`` is
            not reachable; ``"none"`` refuses.
        images: version -> image folder (default :data:`PYTHON_IMAGES`).

    Raises:
        UnsupportedPythonError: ``wanted`` is not reachable (and no fallback applies); the
            message names the reachable versions and the options.
    """
    table = PYTHON_IMAGES if images is None else images
    minor = ".".join(wanted.split(".")[:2])
    if minor in table:
        return PythonChoice(wanted, minor, table[minor])
    newer = sorted((v for v in table if _key(v) > _key(minor)), key=_key)
    if fallback == "nearest" and newer:
        return PythonChoice(wanted, newer[0], table[newer[0]])
    reachable = ", ".join(sorted(table, key=_key))
    options = (f"pass --python-fallback nearest (runs it on {newer[0]}, recorded in report.json)"
               if newer else "no newer version is reachable either")
    raise UnsupportedPythonError(
        f"the spec asks for Python {minor}, which no reachable source carries (offline SWE "
        f"images have {reachable}); options: {options}; give the repo version a spec with "
        "another python in a --spec-table file; or use the official SWE-bench image (needs a "
        "registry)"
    )
