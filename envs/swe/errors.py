"""Errors raised by gymfleet.envs.swe (SWE-bench instances, images, grading, evaluation).

Class tree::

    EnvError                      (gymfleet.envs.errors)
    └── SWEError                          anything in the SWE family
        ├── InstanceLoadError             a dataset or predictions file could not be read
        ├── SpecNotFoundError             no usable install/test spec for (repo, version)
        ├── ProvisionError                no image could be found, pulled or built for an instance
        │   ├── UnsupportedPythonError    the spec asks for a Python the image cannot have offline
        │   ├── CondaOnlySpecError        the spec installs conda packages pip cannot replace
        │   ├── ImageBuildFailedError     a build step failed (step, package, whole build log)
        │   └── RepoNotFoundError         the repository is neither in the mirror nor clonable
        └── SWESetupError                 the repository could not be put at its base commit

Each instance's error in an evaluation (``patch did not apply``, ``tests timed out``, a
``ProvisionError``) is recorded on that instance's report, never raised out of the run.
"""

from __future__ import annotations

from gymfleet.core.errors import EnvError


class SWEError(EnvError):
    """Base class of the SWE family's errors."""


class InstanceLoadError(SWEError):
    """A dataset, instance or predictions file could not be read (missing field, bad JSON)."""


class SpecNotFoundError(SWEError):
    """Neither swebench's spec table nor gymfleet's knows this (repo, version), or its spec
    names something unknown (a service)."""


class ProvisionError(SWEError):
    """No image could be found, pulled or built for an instance."""


class UnsupportedPythonError(ProvisionError):
    """The spec asks for a Python version the base image does not carry and that cannot be
    installed offline."""


class CondaOnlySpecError(ProvisionError):
    """The spec installs through conda (a package list or an environment.yml) and some package
    has no pip counterpart; raised before anything is cloned or built."""


class ImageBuildFailedError(ProvisionError):
    """A step of an image build failed.

    Attributes:
        step: the setup step that failed (``pip_packages``, ``install``, ``pre_install`` ...).
        package: the package pip named in its error, when it named one.
        build_log: the whole build log (written beside the instance's report).
    """

    def __init__(self, message: str, step: str = "", package: str = "", build_log: str = "") -> None:
        super().__init__(message)
        self.step = step
        self.package = package
        self.build_log = build_log


class RepoNotFoundError(ProvisionError):
    """The repository is neither in the mirror directory nor clonable."""


class SWESetupError(SWEError):
    """The repository inside a sandbox could not be reset to the instance's base commit."""
