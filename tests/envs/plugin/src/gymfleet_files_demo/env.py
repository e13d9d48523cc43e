"""FilesEnv: make the working folder hold exactly N files (a sandbox env in ~80 lines)."""

from __future__ import annotations

from typing import Any

from gymfleet.envs.sandbox.base import SandboxSpec
from gymfleet.envs.sandbox_env import Graded, SandboxEnv, SandboxEpisode, bash_block

INSTANCES = {"three": 3, "five": 5, "eight": 8}


class FilesEnv(SandboxEnv[int]):
    """Make the working folder hold exactly N regular files.

    ## Description
    Each instance is a number N. The agent works in an empty sandbox folder with bash.

    ## Observation
    Text: the goal, then each command's exit code and output.

    ## Action
    One fenced ```` ```bash ```` block per turn, or ``submit``. ``noop_action`` is ``submit``.

    ## Reward
    On the last step, 1 when the folder holds exactly N regular files (hidden ones count),
    else 0.

    ## Episode end
    Terminated on ``submit``; truncated (and graded) after 10 turns.

    ## Arguments
    ``sandbox`` (``auto``, ``docker``, ``local``), ``resources``.

    ## Version history
    * v0: initial version.
    """

    @property
    def system_prompt(self) -> str:
        return ("You work in a Linux shell. Each turn, reply with one ```bash block. "
                "When done, reply `submit`.")

    def instances(self) -> dict[str, int]:
        return INSTANCES

    def max_turns(self, ep: SandboxEpisode[int]) -> int:
        return 10

    async def sandbox_spec(self, instance: int, backend: str) -> SandboxSpec:
        return SandboxSpec(image=await self.image("base", backend), network=False)

    async def prepare(self, ep: SandboxEpisode[int]) -> tuple[str, dict[str, Any]]:
        return f"Make the working folder hold exactly {ep.instance} regular files.", {"n": ep.instance}

    async def command(self, ep: SandboxEpisode[int], script: str, info: dict[str, Any]) -> str:
        result = await ep.sandbox.exec(script, timeout_s=30)
        info["exit_code"] = result.exit_code
        return f"exit code {result.exit_code}\n{result.stdout}{result.stderr}"[-4000:]

    async def grade(self, ep: SandboxEpisode[int], why: str) -> Graded:
        counted = await ep.sandbox.exec("find . -mindepth 1 -maxdepth 1 -type f | wc -l", timeout_s=30)
        n_files = int(counted.stdout.strip() or -1) if counted.ok else -1
        reward = 1.0 if n_files == ep.instance else 0.0
        return Graded(reward, f"{why} The folder holds {n_files} files: reward {reward:g}.",
                      {"n_files": n_files})

    def gold_actions(self, instance: int) -> list[str]:
        return [bash_block(f"touch file-{{1..{instance}}}"), "submit"]
