"""The browser task contract, and :class:`UrlTask`: any URL plus a reward function.

A :class:`BrowserTask` opens its page, says what to do, and judges the page. The env owns the
browser, the turn and time limits and the action language; the task owns only what is
specific to it. MiniWoB++ tasks are one implementation (``miniwob.MiniWoBTask``).

Adding a task that is any web page::

    from gymfleet.envs.browser.tasks import TaskOutcome, UrlTask, register_url_task

    async def reward(page) -> TaskOutcome:
        done = await page.evaluate("() => document.title === 'Thanks'")
        return TaskOutcome(reward=1.0 if done else 0.0, done=done)

    register_url_task(
        "mypkg/signup-v0",
        UrlTask(name="signup", url="https://example.test/signup",
                instruction="Sign up as alice.", reward_fn=reward),
    )
    env = gymfleet.envs.registry.make("mypkg/signup-v0")

The reward function runs here, against the Playwright page, after every action, so the agent
cannot tamper with it. A URL task on a public site needs ``network=True`` with Docker.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
import urllib.parse

import gymnasium

if TYPE_CHECKING:  # registration (envs/registration.py) may import this module mid-import of base
    from gymfleet.envs.base import Policy


@dataclass(frozen=True)
class TaskOutcome:
    """How a task judges its page after an action.

    Attributes:
        reward: the env's reward: 1.0 for success, else 0.0 (or a task's own scale).
        done: True when the task reached its end state (the episode terminates).
        raw_reward: the page's own score before mapping (MiniWoB's raw reward), for ``info``.
        reason: why, in words, when the page says ('' when not).
        details: anything else worth keeping in ``info``.
    """

    reward: float = 0.0
    done: bool = False
    raw_reward: float | None = None
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


class BrowserTask(ABC):
    """One kind of web task. Subclasses implement the three hooks; ``name`` is the instance id."""

    name: str
    skip_dom_ids: tuple[str, ...] = ()
    """DOM ids the page text leaves out (a task's own score display)."""

    @abstractmethod
    async def start(self, page: Any, host: Any, seed: int) -> None:
        """Opens the task's page on ``page`` and starts an episode seeded with ``seed``.

        Raises:
            BrowserTaskError: the page did not load or set up.
        """

    def page_key(self, host: Any) -> str | None:
        """The URL of the page this task loads on ``host`` when it can start later episodes
        inside that loaded page (:meth:`restart`); None (the default) when every episode loads
        afresh."""
        return None

    async def restart(self, page: Any, seed: int) -> bool:
        """Starts an episode seeded with ``seed`` inside ``page``, which holds this task's page
        as :meth:`start` loaded it (same document) and has run episodes since. It must leave
        the page as :meth:`start` would have (the same seed gives the same page). Returns False
        when it cannot (the env then loads afresh); the default always can't.

        Raises:
            playwright.async_api.Error: the page failed.
        """
        return False

    @abstractmethod
    async def instruction(self, page: Any) -> str:
        """The goal, in words, for the observation."""

    @abstractmethod
    async def outcome(self, page: Any) -> TaskOutcome:
        """Judges the page; called after every action."""

    def gold_policy(self) -> Policy | None:
        """A scripted policy that solves this task from observations, or None."""
        return None


RewardFn = Callable[[Any], Awaitable[TaskOutcome]]


class UrlTask(BrowserTask):
    """A task that is any URL plus a reward function of the Playwright page.

    Args:
        name: the instance id.
        url: the page to open; ``file://`` paths are mapped for a containerised browser when
            they lie under one of the host's served folders.
        instruction: what the agent must do.
        reward_fn: ``async (page) -> TaskOutcome``; called after every action.
        gold: optional factory of a scripted policy that solves it.
    """

    def __init__(
        self,
        name: str,
        url: str,
        instruction: str,
        reward_fn: RewardFn,
        gold: Callable[[], Policy] | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self._instruction = instruction
        self.reward_fn = reward_fn
        self._gold = gold

    async def start(self, page: Any, host: Any, seed: int) -> None:
        url = self.url
        if url.startswith("file://"):
            url = host.file_url(Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)))
        await page.goto(url, wait_until="load")

    async def instruction(self, page: Any) -> str:
        return self._instruction

    async def outcome(self, page: Any) -> TaskOutcome:
        return await self.reward_fn(page)

    def gold_policy(self) -> Policy | None:
        return self._gold() if self._gold is not None else None


def register_url_task(env_id: str, task: BrowserTask, **env_kwargs: Any) -> None:
    """Registers ``env_id`` as a browser env that plays ``task`` (and only it).

    Args:
        env_id: e.g. ``"mypkg/signup-v0"``.
        task: the task (a :class:`UrlTask` or any :class:`BrowserTask`).
        env_kwargs: defaults of :class:`~gymfleet.envs.browser.env.BrowserEnvConfig`
            (``max_turns``, ``sandbox``...).
    """
    gymnasium.register(
        id=env_id,
        entry_point="gymfleet.envs.browser.env:BrowserEnv",
        kwargs={"tasks": [task], **env_kwargs},
    )
