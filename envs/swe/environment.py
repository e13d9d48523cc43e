"""A spec's environment without conda: pip requirements from conda package lists, requirements
files and ``environment.yml``, or a refusal naming what pip cannot install.

swebench 4.1.0 builds every environment with conda (``make_env_script_list_py``): ``conda create
python=X <packages>``, ``pip install -r`` of a requirements file it downloads (``-r`` includes
inlined, ``-e .`` / comments / ``.[test`` lines dropped), or ``conda env create`` from an
``environment.yml``. gymfleet's images have a pip venv and no conda, so :func:`plan_environment`
translates each source to pip requirements and records what it translated; a conda package with
no PyPI counterpart (a system library such as ``gtk4``) makes the spec unprovisionable, with the
reason, before anything is cloned or built.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.errors import CondaOnlySpecError
from gymfleet.envs.swe.specs import RepoSpec

ReadFile = Callable[[str], "str | None"]
"""Reads a file of the repository at the environment setup commit (None when absent)."""

CONDA_TO_PIP: dict[str, str] = {
    "pytorch": "torch", "pyqt": "PyQt5", "py-opencv": "opencv-python",
    "msgpack-python": "msgpack", "setuptools_scm": "setuptools-scm", "matplotlib-base": "matplotlib",
    "pytables": "tables", "python-graphviz": "graphviz", "netcdf4": "netCDF4",
    "iris": "scitools-iris", "pint": "Pint", "pseudonetcdf": "PseudoNetCDF",
}
"""conda-forge names whose PyPI name differs."""

CONDA_ONLY: frozenset[str] = frozenset({
    "gtk4", "gtk3", "graphviz", "ghostscript", "cairo", "pango", "tk", "libpng", "freetype",
    "pkg-config", "compilers", "c-compiler", "cxx-compiler", "fortran-compiler", "gcc", "make",
    "nodejs", "mpich", "openmpi", "gdal", "eccodes", "pygobject", "wxpython", "texlive-core",
    "imagemagick", "ffmpeg", "inkscape", "poppler", "libgdal", "cdo", "nco", "cdms2",
})
"""conda packages with no pip-installable counterpart here (system libraries, toolchains, or
packages that only build against conda's libraries)."""

BUNDLED_IN_WHEELS: frozenset[str] = frozenset({"hdf5", "libnetcdf", "proj", "geos"})
"""C libraries conda installs alone that pip gets inside the wheels needing them (h5py,
netCDF4, pyproj, shapely): dropped from the translation, and the drop recorded."""

_IGNORED = {"python", "pip"}
_REQ_EXCLUDE = ("-e .", "#", ".[test")


@dataclass
class EnvPlan:
    """pip's share of a spec's environment.

    Attributes:
        requirements: requirement lines, installed with one ``pip install`` each group.
        requirements_file: the text of a requirements file (swebench's ``get_requirements``),
            installed with ``pip install -r``.
        translated: what came from conda and how (``"conda packages: numpy==1.19.2 ..."``),
            recorded on the image and the report.
    """

    requirements: list[str] = field(default_factory=list)
    requirements_file: str = ""
    translated: list[str] = field(default_factory=list)


def plan_environment(spec: RepoSpec, read_file: ReadFile | None) -> EnvPlan:
    """The pip requirements of ``spec``'s environment.

    Args:
        spec: the repo version's spec (``packages`` is a package list, ``requirements.txt`` or
            ``environment.yml``).
        read_file: reads a repository file at the setup commit; None when the repository is
            not at hand (then file-based specs are planned at build time).

    Raises:
        CondaOnlySpecError: a conda package has no pip counterpart; the message names them.
    """
    plan = EnvPlan()
    packages = spec.packages.strip()
    if packages == "requirements.txt":
        if read_file is not None:
            plan.requirements_file = requirements_text(spec.repo, read_file)
    elif packages == "environment.yml":
        if read_file is not None:
            plan.requirements += environment_yml_requirements(spec, read_file)
            plan.translated.append("environment.yml -> pip: " + " ".join(plan.requirements))
    elif packages:
        plan.requirements += conda_list_to_pip(packages.split(), spec)
        plan.translated.append(f"conda packages -> pip: {' '.join(plan.requirements)}")
    if plan.translated:
        listed = packages.split() if packages not in ("environment.yml", "requirements.txt") \
            else _conda_names(spec, read_file)
        dropped = sorted({n for n in listed if _name(n) in BUNDLED_IN_WHEELS})
        if dropped:
            plan.translated.append("dropped (their wheels bundle them): " + " ".join(dropped))
    return plan


def _name(item: str) -> str:
    match = re.match(r"^['\"]?([A-Za-z0-9_.\-]+)", item.strip())
    return match.group(1).lower() if match else item


def _conda_names(spec: RepoSpec, read_file: ReadFile | None) -> list[str]:
    if read_file is None:
        return []
    paths = upstream.constants().MAP_REPO_TO_ENV_YML_PATHS.get(spec.repo, ["environment.yml"])
    text = next((t for t in (read_file(p) for p in paths) if t is not None), "")
    deps = (yaml.safe_load(text) or {}).get("dependencies") or []
    return [str(d) for d in deps if not isinstance(d, dict)]


def conda_requirement(item: str) -> str | None:
    """One conda match spec as a pip requirement (``numpy=1.19`` -> ``numpy==1.19.*``,
    ``numpy==1.19.2`` unchanged); None for ``python`` and ``pip``; raises KeyError-like
    :class:`CondaOnlySpecError` for conda-only packages (see :func:`conda_list_to_pip`)."""
    item = item.strip().strip("'\"")
    match = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(.*)$", item)
    if not match:
        return item
    name, constraint = match.group(1).lower(), match.group(2).replace(" ", "")
    if name in _IGNORED or name in BUNDLED_IN_WHEELS:
        return None
    if name in CONDA_ONLY:
        raise CondaOnlySpecError(name)
    pip_name = CONDA_TO_PIP.get(name, match.group(1))
    if re.match(r"^=[^=]", constraint):  # conda's fuzzy `=1.19` means 1.19.*
        version = constraint[1:]
        constraint = f"=={version}" if version.endswith("*") else f"=={version}.*"
    return pip_name + constraint


def conda_list_to_pip(items: list[str], spec: RepoSpec) -> list[str]:
    """Conda package specs as pip requirements.

    Raises:
        CondaOnlySpecError: some have no pip counterpart (all of them are named).
    """
    pip: list[str] = []
    missing: list[str] = []
    for item in items:
        try:
            requirement = conda_requirement(item)
        except CondaOnlySpecError as exc:
            missing.append(str(exc))
            continue
        if requirement:
            pip.append(requirement)
    if missing:
        raise CondaOnlySpecError(
            f"{spec.repo} {spec.version} installs through conda and {', '.join(missing)} "
            "has no pip counterpart, so SWE images (pip, no conda) cannot build it offline: "
            "give this repo version a spec without them in a --spec-table file, or use the "
            "official SWE-bench image"
        )
    return pip


def environment_yml_requirements(spec: RepoSpec, read_file: ReadFile) -> list[str]:
    """The dependencies of the repo's ``environment.yml`` (conda and its ``pip:`` section) as
    pip requirements.

    Raises:
        CondaOnlySpecError: no environment.yml at the setup commit, or it needs conda-only
            packages.
    """
    paths = upstream.constants().MAP_REPO_TO_ENV_YML_PATHS.get(spec.repo, ["environment.yml"])
    text = next((t for t in (read_file(p) for p in paths) if t is not None), None)
    if text is None:
        raise CondaOnlySpecError(f"{spec.repo} {spec.version}: no environment.yml at {paths}")
    try:
        data: Any = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise CondaOnlySpecError(f"{spec.repo} {spec.version}: environment.yml: {exc}") from exc
    conda: list[str] = []
    pip: list[str] = []
    for dep in data.get("dependencies") or []:
        if isinstance(dep, dict):
            pip += [str(p) for p in dep.get("pip") or []]
        else:
            conda.append(str(dep))
    return conda_list_to_pip(conda, spec) + pip


def requirements_text(repo: str, read_file: ReadFile) -> str:
    """swebench's ``get_requirements_by_commit`` on local files: the first requirements path of
    the repo that exists, ``-r`` includes inlined first, and ``-e .``, comments and ``.[test``
    lines dropped; ``types-pkg_resources`` replaced as swebench does."""
    paths = upstream.constants().MAP_REPO_TO_REQS_PATHS.get(repo, ["requirements.txt"])
    for path in paths:
        text = read_file(path)
        if text is not None:
            break
    else:
        return ""
    folder = "/".join(path.split("/")[:-1])
    original: list[str] = []
    included: list[str] = []
    for line in text.split("\n"):
        if line.strip().startswith("-r"):
            name = line.strip()[len("-r"):].strip()
            extra = read_file(f"{folder}/{name}" if folder else name) or ""
            included += [x for x in extra.split("\n") if not x.strip().startswith(_REQ_EXCLUDE)]
        elif not line.strip().startswith(_REQ_EXCLUDE):
            original.append(line)
    included.append("\n".join(original))
    return re.sub(r"^types-pkg_resources([<>=!~]=?.*|$)", "types-setuptools", "\n".join(included),
                  flags=re.MULTILINE)
