"""The env contract, checked over every registered env id by both checkers: gymfleet's shipped
``check_env`` (the same function `gymfleet envs check ID` runs: types of reset/step, gold earns 1,
no-op earns 0, close leaves nothing behind) and Gymnasium's own
``gymnasium.utils.env_checker.check_env`` (spaces, seeding, step determinism, no shared info),
without a warning. Families with many instances are checked on their first two; each family's
own tests cover every instance. The per-task MiniWoB ids (one per task with a gold policy; the
other tasks are Browser-v0 instances) each pass gymfleet's checker on one shared Chromium in
tests/envs/browser/test_contract_browser.py (a browser per id here would cost ~5 s each);
Gymnasium's checker runs here on Browser-v0, their class.

An env that needs Docker, a sandbox or Chromium asks for the service's fixture (tests/conftest.py):
skipped here when it is missing, a failure in CI."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from gymfleet.envs.check import check_env_async, check_gymnasium_api
from gymfleet.envs.registry import env_class, list_envs
from gymfleet.envs.needs import FIXES
from tests.conftest import IN_CI, _docker_up, require

N_INSTANCES = 2
MAX_STEPS = 100
# Families that register one id per task: each of those ids passes gymfleet's checker on one
# shared Chromium (tests/envs/browser/test_contract_browser.py); Gymnasium's checker runs here on
# the family's generic id, the same class (a private browser per id would cost ~5 s each).
PER_TASK_FAMILY_PREFIX = "gymfleet/miniwob."
# need -> the fixture that provides it (fails in CI when missing). "sandbox" (auto) runs on Docker
# wherever a daemon answers, and CI has one.
NEED_FIXTURES = {"docker": "docker_available", "local": "bwrap_available", "chromium": "chromium_path"}


def contract_env_ids() -> list[str]:
    """Every registered id but the per-task ones (see PER_TASK_FAMILY_PREFIX)."""
    return [env_id for env_id in list_envs() if not env_id.startswith(PER_TASK_FAMILY_PREFIX)]


def _param(env_id: str) -> object:
    needs = env_class(env_id).requirements({})
    marks = [pytest.mark.docker] if needs & {"docker", "sandbox"} else []
    marks += [pytest.mark.browser] if "chromium" in needs else []
    if "docker" in needs:  # SWE: a task image per instance
        marks += [pytest.mark.slow, pytest.mark.timeout(1800)]
    return pytest.param(env_id, marks=marks, id=env_id)


ENV_PARAMS = [_param(env_id) for env_id in contract_env_ids()]


@pytest.fixture
def services(request: pytest.FixtureRequest) -> None:
    """The services the parametrized env needs (skip locally, fail in CI when missing)."""
    needs = env_class(request.node.callspec.params["env_id"]).requirements({})
    for need in sorted(needs):
        if need in NEED_FIXTURES:
            request.getfixturevalue(NEED_FIXTURES[need])
        elif need == "sandbox" and IN_CI:
            request.getfixturevalue("docker_available")
        elif need == "sandbox":
            require(_docker_up() or _bwrap_up(), "a sandbox backend", FIXES["docker"])


@pytest.mark.parametrize("env_id", ENV_PARAMS)
async def test_env_contract(env_id: str, services: None) -> None:
    report = await check_env_async(env_id, n_instances=N_INSTANCES, max_steps=MAX_STEPS)
    assert report.n_instances >= 1
    assert set(report.gold_rewards.values()) == {1.0}, f"{env_id}: gold earned {report.gold_rewards}"
    assert set(report.noop_rewards.values()) == {0.0}, f"{env_id}: no-op earned {report.noop_rewards}"


@pytest.mark.parametrize("env_id", ENV_PARAMS)
def test_gymnasium_env_checker(env_id: str, services: None) -> None:
    """Gymnasium's checker passes with no warning (check_gymnasium_api raises EnvCheckError with
    Gymnasium's message otherwise)."""
    check_gymnasium_api(env_id)


def test_every_family_is_in_the_contract() -> None:
    ids = contract_env_ids()
    assert {"gymfleet/Terminal-v0", "gymfleet/TerminalEasy-v0", "gymfleet/SWE-v0", "gymfleet/Slides-v0"} <= set(ids)
    if any(i.startswith(PER_TASK_FAMILY_PREFIX) for i in list_envs()):
        assert "gymfleet/Browser-v0" in ids  # its per-task ids: test_contract_browser.py


@pytest.mark.bwrap
def test_import_gymfleet_registers_with_gymnasium(bwrap_available: bool) -> None:
    """In a fresh interpreter: `import gymfleet, gymnasium` is enough for `gymnasium.make`, the env
    module loads only when made, and the env steps; `gymfleet:` names the module to import."""
    code = (
        "import sys, gymfleet, gymnasium\n"
        "assert 'gymfleet.envs.terminal' not in sys.modules\n"
        "env = gymnasium.make('gymfleet/Terminal-v0', sandbox='local')\n"
        "obs, info = env.reset(seed=0)\n"
        "obs, reward, terminated, truncated, info = env.step('```bash\\necho hello\\n```')\n"
        "assert 'hello' in obs and (reward, terminated, truncated) == (0.0, False, False), obs\n"
        "env.close()\n"
        "print('stepped')\n"
    )
    ran = _fresh_python(code)
    assert ran.returncode == 0 and ran.stdout.strip() == "stepped", ran.stdout + ran.stderr


def test_import_gymfleet_does_not_import_gymnasium() -> None:
    """Registration waits for Gymnasium (~0.2 s to import) instead of importing it; the ids are
    there once it is imported, in either order, even mid-import of a gymfleet module."""
    code = (
        "import sys, gymfleet\n"
        "assert 'gymnasium' not in sys.modules and 'gymfleet.envs.registry' not in sys.modules\n"
        "from gymfleet.envs.base import AgentEnv\n"  # imports Gymnasium: the hook fires mid-import
        "import gymnasium\n"
        "assert gymnasium.spec('gymfleet/Slides-v0').entry_point == 'gymfleet.envs.slides.env:SlidesEnv'\n"
        "assert gymnasium.__spec__.loader.__class__.__module__.startswith('_frozen_importlib')\n"
        "assert 'gymfleet.envs.slides.env' not in sys.modules\n"
        "print('gymfleet/Browser-v0' in gymnasium.registry)\n"
    )
    ran = _fresh_python(code)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    has_browser = all(importlib.util.find_spec(m) for m in ("miniwob", "playwright"))
    assert ran.stdout.strip() == str(has_browser)  # the MiniWoB family registered mid-import too
    later = _fresh_python("import gymnasium\nenv = gymnasium.make('gymfleet:gymfleet/TerminalEasy-v0')\n"
                          "print(type(env.unwrapped).__name__)\n")
    assert later.returncode == 0 and later.stdout.strip() == "TerminalEnv", later.stderr


def _fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def _bwrap_up() -> bool:
    path = shutil.which("bwrap")
    return bool(path) and subprocess.run([path, "--ro-bind", "/", "/", "true"], capture_output=True).returncode == 0
