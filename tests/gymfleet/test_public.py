"""The public surface: `import gymfleet` is light and exports the handful of names a user needs."""

from __future__ import annotations

import inspect
import subprocess
import sys

import gymfleet


def test_every_public_name_resolves() -> None:
    assert {"AgentEnv", "make", "check_env", "RunConfig", "TrainConfig", "collect", "train"} <= set(gymfleet.__all__)
    for name in gymfleet.__all__:
        assert getattr(gymfleet, name) is not None, name
    assert inspect.iscoroutinefunction(gymfleet.collect) and inspect.iscoroutinefunction(gymfleet.train)
    from gymfleet.envs.base import AgentEnv
    from gymfleet.envs.check import check_env

    assert gymfleet.AgentEnv is AgentEnv and gymfleet.check_env is check_env


def test_import_gymfleet_stays_light() -> None:
    code = "import sys, gymfleet; print(sorted(m for m in ('torch', 'gymnasium', 'rich', 'sqlalchemy', 'pydantic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_gymfleet_make_gives_a_gymnasium_env() -> None:
    env = gymfleet.make("gymfleet/Terminal-v0", sandbox="local")
    try:
        assert env.unwrapped.instance_ids()
    finally:
        env.close()
