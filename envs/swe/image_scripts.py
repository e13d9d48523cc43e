"""The Dockerfiles and shell scripts of the two SWE image layers built on a Python parent.

Layers, as swebench's (base / env / instance), without conda:

* env image, one per (repo, version, Python): the repository cloned at the environment setup
  commit into ``/testbed``, the spec's environment installed with pip (``setup_env.sh``: conda
  package lists translated, the requirements file, ``pip_packages``), and the spec's
  ``services`` each in its own venv (:mod:`gymfleet.envs.swe.services`);
* instance image, one per instance, FROM its env image (``setup_instance.sh``): the repository
  reset to the base commit, refs and tags newer than it deleted and pruned (so the fix cannot be
  read), then swebench's repo steps: ``pre_install``, ``install`` and a commit of what they
  changed (swebench's ``git commit -am SWE-bench``), recorded in ``START_COMMIT_FILE`` so that an
  agent's diff is taken against it.

Every step prints ``>>>>> gymfleet step: NAME`` first, so a failed build names its step.
"""

from __future__ import annotations

import shlex

from gymfleet.envs.swe import services
from gymfleet.envs.swe.environment import EnvPlan
from gymfleet.envs.swe.specs import RepoSpec

REPO_DIR = "/testbed"
STEP_MARKER = ">>>>> gymfleet step:"
START_COMMIT_FILE = "/opt/gymfleet/start_commit"
"""Holds the commit an instance image's repository starts at (the base commit plus the commit
of what pre_install/install changed)."""
_REQS_PATH = "/root/requirements.txt"
WHEELHOUSE = "/opt/gymfleet/wheelhouse"
"""Wheels of the repository's build requirements, staged at build time (with network) so that
the eval's re-install builds offline (``PIP_FIND_LINKS``); pip's build isolation otherwise asks
an index for ``setuptools>=45`` and fails."""
# The build requirements of /testbed (pyproject.toml's [build-system] requires, else setuptools
# and wheel as pip assumes), read with pip's own TOML parser (any Python).
_BUILD_REQUIRES = r"""python - > /tmp/gymfleet-build-requires.txt <<'GYMFLEET_PY_EOF'
import os
requires = ["setuptools>=40.8.0", "wheel"]
if os.path.exists("pyproject.toml"):
    try:
        import tomllib as toml
    except ImportError:
        from pip._vendor import tomli as toml
    with open("pyproject.toml", "rb") as f:
        requires = toml.load(f).get("build-system", {}).get("requires", requires)
print("\n".join(requires))
GYMFLEET_PY_EOF"""


def env_dockerfile(parent: str) -> str:
    """The Dockerfile of an env image."""
    return (
        f"FROM {parent}\n"
        f"COPY repo {REPO_DIR}\n"
        "COPY setup_env.sh /root/setup_env.sh\n"
        f"COPY requirements.txt {_REQS_PATH}\n"
        f"WORKDIR {REPO_DIR}\n"
        "RUN bash /root/setup_env.sh\n"
    )


def instance_dockerfile(env_image: str) -> str:
    """The Dockerfile of an instance image."""
    return (
        f"FROM {env_image}\n"
        "COPY setup_instance.sh /root/setup_instance.sh\n"
        f"WORKDIR {REPO_DIR}\n"
        "RUN bash /root/setup_instance.sh\n"
    )


def _step(name: str) -> str:
    return f"echo '{STEP_MARKER} {name}'"


def setup_env_script(spec: RepoSpec, plan: EnvPlan) -> str:
    """The env image's build script: swebench's environment steps, with pip for conda."""
    lines = ["#!/bin/bash", "set -euxo pipefail", f"cd {REPO_DIR}"]
    if plan.requirements:
        lines += [_step("packages"),
                  "python -m pip install " + " ".join(shlex.quote(r) for r in plan.requirements)]
    if plan.requirements_file.strip():
        lines += [_step("requirements"), f"python -m pip install -r {_REQS_PATH}"]
    if spec.pip_packages:
        lines += [_step("pip_packages"),
                  "python -m pip install " + " ".join(shlex.quote(p) for p in spec.pip_packages)]
    if spec.services:
        # each in its own venv under /opt/gymfleet/services: the tests' requests stays the repo's
        lines += [_step("services"), *services.install_lines(services.resolve(spec.services))]
    lines += [f"rm -f {_REQS_PATH}"]
    return "\n".join(lines) + "\n"


def prune_lines() -> list[str]:
    """Shell that drops every object the base commit and the kept tags do not reach. ``git gc
    --prune=now`` walks their whole history, so a partial mirror (objects missing further back)
    fails it; then the history is cut at the base commit (``.git/shallow``: nothing before it is
    read), the tags (whose history is not all there) are deleted, and the prune runs again.
    The reset only needs the base commit's tree, which the mirror check reads first."""
    return [
        "if ! git gc -q --prune=now 2>/tmp/gymfleet-gc.err; then "
        "echo \"note: $(tail -n1 /tmp/gymfleet-gc.err); history before the base commit is "
        "incomplete: cut at the base commit, tags dropped\"; "
        "git tag -l | xargs -r git tag -d >/dev/null; "
        "git rev-parse HEAD > .git/shallow; "
        "git reflog expire --expire=now --all; "
        "git gc -q --prune=now; fi",
    ]


def setup_instance_script(spec: RepoSpec, base_commit: str) -> str:
    """The instance image's build script: swebench's ``make_repo_script_list_py`` from the reset
    on (the clone is the env image's), then the start commit recorded."""
    lines = [
        "#!/bin/bash",
        "set -euxo pipefail",
        f"cd {REPO_DIR}",
        _step("reset"),
        f"git -c advice.detachedHead=false checkout -q -f {base_commit}",
        "git clean -fdqx",
        # Delete every branch and remote ref, and the tags newer than the base commit
        # (older tags stay: setuptools_scm versions are computed from them), then prune.
        "git remote | xargs -r -n1 git remote remove",
        "git for-each-ref --format='%(refname)' refs/heads refs/remotes refs/stash "
        "refs/original refs/notes | while read -r ref; do git update-ref --no-deref -d \"$ref\"; done",
        f"TARGET_TIMESTAMP=$(git show -s --format=%ct {base_commit})",
        "git for-each-ref --format='%(refname:short)' refs/tags | while read -r tag; do "
        "t=$(git log -1 --format=%ct \"$tag^{commit}\" 2>/dev/null || echo 0); "
        "if [ \"$t\" -gt \"$TARGET_TIMESTAMP\" ]; then git tag -d \"$tag\" >/dev/null; fi; done",
        "git checkout -q -b main",
        "git reflog expire --expire=now --all",
        *prune_lines(),
        # swebench fails here; a commit dated after the base but reachable from it (rebased
        # history) is not the future, so this only reports
        f'[ "$(git log --oneline --all --since=@$((TARGET_TIMESTAMP + 1)) | wc -l)" -eq 0 ] '
        "|| echo 'note: history holds commits dated after the base commit'",
    ]
    if spec.pre_install:
        lines += [_step("pre_install"), *spec.pre_install]
    if spec.install:
        lines += [_step("install"), spec.install]
    lines += [
        _step("wheelhouse"),
        _BUILD_REQUIRES,
        f"python -m pip download -q --dest {WHEELHOUSE} -r /tmp/gymfleet-build-requires.txt",
        "rm -f /tmp/gymfleet-build-requires.txt",
    ]
    lines += [
        _step("commit"),
        # what the install left untracked stays out of every diff an agent submits
        "git status --porcelain --untracked-files=all | sed -n 's/^?? //p' >> .git/info/exclude",
        "git commit -q --allow-empty -am SWE-bench",
        f"mkdir -p {START_COMMIT_FILE.rsplit('/', 1)[0]}",
        f"git rev-parse HEAD > {START_COMMIT_FILE}",
    ]
    return "\n".join(lines) + "\n"
