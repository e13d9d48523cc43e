"""EnvResources' typed registry: a family's SharedResource is made once per resources at the first
``get``, closed with them (newest first), counted in ``usage()``, and replaceable by ``provide``;
the module itself imports no family."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Self

import pytest

from gymfleet.envs.browser.hosts import BrowserHosts
from gymfleet.envs.errors import SandboxClosedError
from gymfleet.envs.images import ImageTags
from gymfleet.envs.resources import Catalogue, EnvResources, SharedResource
from gymfleet.envs.swe.harness import SWEHarnesses
from gymfleet.envs.terminal.env import TerminalEnv, TerminalTasks

ROOT = Path(__file__).resolve().parents[2]
CLOSED: list[str] = []


class Counter(SharedResource):
    """A plugin's resource: counts what it was asked, and records its closing."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    @classmethod
    def create(cls, resources: EnvResources) -> Self:
        return cls(f"counter-{resources.run_id}")

    def counters(self) -> Mapping[str, int]:
        return {"calls": self.calls}

    async def aclose(self) -> None:
        CLOSED.append(self.name)


class Other(Counter):
    @classmethod
    def create(cls, resources: EnvResources) -> Self:
        return cls("other")


class Words(Catalogue[str, list[str]]):
    """A plugin's catalogue."""


async def test_a_resource_is_made_once_and_closed_with_the_resources() -> None:
    CLOSED.clear()
    async with EnvResources.open(run_id="r7", probe=()) as resources:
        assert resources.opened(Counter) is None
        first = resources.get(Counter)
        first.calls += 3
        assert resources.get(Counter) is first and first.name == "counter-r7"
        resources.get(Other)
        assert resources.usage().counters == {"calls": 3}
        assert CLOSED == []
    assert CLOSED == ["other", "counter-r7"]  # newest first
    with pytest.raises(SandboxClosedError, match="closed"):
        resources.get(Words)


async def test_provide_puts_another_provider_in_front_of_a_key() -> None:
    CLOSED.clear()
    async with EnvResources.open(probe=()) as resources:
        resources.provide(Counter, lambda _: Counter("fake"))
        assert resources.get(Counter).name == "fake"
        with pytest.raises(ValueError, match="open already"):
            resources.provide(Counter, lambda _: Counter("late"))
        resources.provide(Other, lambda _: Counter("wrong type"))  # type: ignore[arg-type, return-value]
        with pytest.raises(TypeError, match="made a Counter"):
            resources.get(Other)
    assert CLOSED == ["fake"]


async def test_a_catalogue_loads_each_key_once_and_forgets_a_failed_load() -> None:
    loads: list[str] = []

    def load(key: str) -> list[str]:
        loads.append(key)
        if key == "bad":
            raise OSError("unreadable")
        return [key]

    async with EnvResources.open(probe=()) as resources:
        words = resources.get(Words)
        assert words.load("a", lambda: load("a")) == ["a"]
        assert words.load("a", lambda: load("a")) == ["a"]
        for _ in range(2):
            with pytest.raises(OSError):
                words.load("bad", lambda: load("bad"))
    assert loads == ["a", "bad", "bad"]


async def test_envs_on_one_resources_share_the_family_catalogue() -> None:
    async with EnvResources.open(probe=()) as resources:
        a = TerminalEnv(sandbox="local", resources=resources)
        b = TerminalEnv(sandbox="local", resources=resources)
        assert a.tasks is b.tasks
        assert resources.opened(TerminalTasks) is not None


async def test_the_built_in_families_register_their_resources() -> None:
    async with EnvResources.open(run_id="r9", probe=()) as resources:
        hosts = resources.get(BrowserHosts)
        assert hosts.run_id == "r9"
        assert isinstance(resources.get(SWEHarnesses), SWEHarnesses)
        assert isinstance(resources.get(ImageTags), ImageTags)
        usage = resources.usage()
        assert (usage.browser_contexts, usage.chromium_hosts) == (0, 0)


def test_the_resources_module_imports_no_family() -> None:
    tree = ast.parse((ROOT / "envs" / "resources.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    families = ("browser", "swe", "terminal", "slides", "images", "harbor")
    assert not [m for m in imported if m.startswith("gymfleet.envs.") and m.split(".")[2] in families]


async def test_a_family_defines_its_own_machine_needs() -> None:
    """``envs/needs.py`` knows the sandbox backends' needs only; a family's (the browser's
    ``chromium``) comes with its env class, and a need nobody defines is reported, not ignored."""
    from gymfleet.envs.browser.chromium import CHROMIUM
    from gymfleet.envs.browser.env import BrowserEnv
    from gymfleet.envs.needs import NEEDS, MachineNeed
    from gymfleet.envs.slides.env import SlidesEnv

    assert set(NEEDS) == {"sandbox", "docker", "local"}
    tree = ast.parse((ROOT / "envs" / "needs.py").read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)}
    code = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]
    assert not [c for c in code if "chromium" in c.lower()]  # no family's need in the code
    assert BrowserEnv.defined_needs({}) == SlidesEnv.defined_needs({}) == (CHROMIUM,)
    gone = MachineNeed("gpu", "GPU", "add one", lambda: False)
    here = MachineNeed("gpu", "GPU", "add one", lambda: True)
    async with EnvResources.open(probe=()) as resources:
        assert resources.missing({"gpu"}, [here]) == []
        assert resources.missing({"gpu"}, [gone]) == ["no GPU: add one"]
        (unknown,) = resources.missing({"gpu"})
        assert unknown.startswith("unknown requirement 'gpu' (known: docker, local, sandbox)")
