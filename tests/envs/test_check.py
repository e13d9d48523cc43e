"""``check_env`` finds each broken rule and says what to fix (the contract test relies on it)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from gymfleet.envs.base import Policy, ScriptedPolicy
from gymfleet.envs.check import check_env, check_env_async
from gymfleet.envs.errors import EnvCheckError
from gymfleet.envs.resources import EnvResources, ResourcesConfig, SandboxLease
from gymfleet.envs.sandbox.base import SandboxSpec
from gymfleet.envs.sandbox_env import Graded, SandboxEnv, SandboxEpisode
from tests.envs.terminal.fake_sandbox import FakeBackend
from tests.fakes import EchoEnv


class WrongGoldEnv(EchoEnv):
    def gold_policy(self, instance_id: str | None = None) -> Policy:
        return ScriptedPolicy(["not the word"])


class NeedsResetGoldEnv(EchoEnv):
    def gold_policy(self, instance_id: str | None = None) -> Policy:
        if self.word is None or not self.reset_seen:
            raise RuntimeError("call reset() first")
        return ScriptedPolicy([self.word])

    reset_seen = False


class LeakyEnv(EchoEnv):
    """Starts a process at reset that close never stops."""

    def __init__(self) -> None:
        super().__init__()
        self.procs: list[subprocess.Popen[bytes]] = []

    async def reset_async(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.procs.append(subprocess.Popen(["sleep", "60"]))
        return await super().reset_async(seed=seed, options=options)


class WordEnv(SandboxEnv[str]):
    """A tiny sandbox env: write the instance's word to word.txt."""

    @property
    def system_prompt(self) -> str:
        return "Write the word to word.txt, then submit."

    def instances(self) -> dict[str, str]:
        return {"a": "alpha", "b": "beta"}

    async def sandbox_spec(self, instance: str, backend: str) -> SandboxSpec:
        return SandboxSpec()

    async def prepare(self, ep: SandboxEpisode[str]) -> tuple[str, dict[str, Any]]:
        return f"Write {ep.instance}.", {}

    async def grade(self, ep: SandboxEpisode[str], why: str) -> Graded:
        got = await ep.sandbox.exec("cat word.txt", timeout_s=10)
        reward = float(got.stdout.strip() == ep.instance)
        return Graded(reward, f"{why} reward {reward:g}")

    def gold_actions(self, instance: str) -> list[str]:
        return [f"```bash\necho {instance} > word.txt\n```", "submit"]


class ForgetfulWordEnv(WordEnv):
    """Leases a second sandbox per episode and never releases it."""

    extra: list[SandboxLease] = []

    async def prepare(self, ep: SandboxEpisode[str]) -> tuple[str, dict[str, Any]]:
        self.extra.append(await (await self.env_resources()).lease(SandboxSpec(), backend="fake"))
        return await super().prepare(ep)


def test_a_sound_env_passes() -> None:
    report = check_env(EchoEnv())
    assert report.n_instances == 2 and report.gold_rewards == {"alpha": 1.0, "beta": 1.0}
    assert report.noop_rewards == {"alpha": 0.0, "beta": 0.0}


@pytest.mark.parametrize(("env", "message"), [
    (WrongGoldEnv(), "alpha (gold episode): earned 0, must earn 1 (the gold solution must solve it)"),
    (NeedsResetGoldEnv(), "gold_policy(instance_id) needs a reset"),
])
def test_a_broken_env_is_named_with_the_fix(env: EchoEnv, message: str) -> None:
    with pytest.raises(EnvCheckError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_env(env)


def test_a_process_left_behind_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    env = LeakyEnv()
    import gymfleet.envs.check as check

    monkeypatch.setattr(check, "make_agent_env", lambda env_id, resources, **kw: env)
    try:
        with pytest.raises(EnvCheckError, match="close left processes behind: .*sleep"):
            check_env("leaky/Env-v0")
    finally:
        for proc in env.procs:
            proc.kill()
            proc.wait()


async def test_a_sandbox_left_leased_is_found() -> None:
    backend = FakeBackend()  # bash on the host: no pooling (a pool never resets an unisolated sandbox)
    async with EnvResources.open(ResourcesConfig.private(), backends={"fake": backend}, probe=()) as resources:
        assert (await check_env_async(WordEnv(sandbox="fake", resources=resources))).n_instances == 2
        assert resources.usage().sandboxes_leased == 0
        with pytest.raises(EnvCheckError, match=r"close left 4 sandbox\(es\) leased: release"):
            await check_env_async(ForgetfulWordEnv(sandbox="fake", resources=resources))
        for lease in ForgetfulWordEnv.extra:
            await lease.release()
