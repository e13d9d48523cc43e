"""Fakes implementing the real Protocols, for tests of the shared parts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gymfleet.envs.base import AgentEnv, Policy, ScriptedPolicy


class EchoEnv(AgentEnv):
    """Reward 1 when the agent says the secret word of the instance, else 0; ends after one turn.

    Description: a toy env for contract tests. Observation: the instruction. Action: any
    text. Reward: 1 if the action equals the instance's word. Episode end: terminated after
    one action. Arguments: ``words``. Version history: v0.
    """

    noop_action = ""

    def __init__(self, words: tuple[str, ...] = ("alpha", "beta")) -> None:
        super().__init__()
        self.words = list(words)
        self.word = self.words[0]
        self.closed = False

    @property
    def system_prompt(self) -> str:
        return "Say the word you are asked for."

    def instance_ids(self) -> list[str]:
        return list(self.words)

    async def reset_async(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        ids = self.instance_ids()
        if options and "instance_id" in options:
            if options["instance_id"] not in ids:
                raise KeyError(options["instance_id"])
            self.word = options["instance_id"]
        else:
            self.word = ids[(seed or 0) % len(ids)]
        return f"Say {self.word!r}.", {"instance_id": self.word}

    async def step_async(self, action: str):
        reward = 1.0 if action.strip() == self.word else 0.0
        return "done", reward, True, False, {"instance_id": self.word}

    async def close_async(self) -> None:
        self.closed = True

    def gold_policy(self, instance_id: str | None = None) -> Policy:
        return ScriptedPolicy([instance_id or self.word])


class PictureEchoEnv(EchoEnv):
    """EchoEnv that saves one PNG per step under ``pictures_dir/<word>/`` (its ``artifacts_kwarg``).

    Arguments: ``pictures_dir``. Otherwise as EchoEnv.
    """

    artifacts_kwarg = "pictures_dir"

    def __init__(self, pictures_dir: str = "pictures") -> None:
        super().__init__()
        self.pictures_dir = Path(pictures_dir)

    async def step_async(self, action: str):
        folder = self.pictures_dir / self.word
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "step.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        return await super().step_async(action)
