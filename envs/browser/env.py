"""The browser env: one web task per episode in Chromium, driven by Playwright, as text."""

from __future__ import annotations

import asyncio
import re
import shutil
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from playwright.async_api import Error as PlaywrightError
from pydantic import ConfigDict, Field

from gymfleet.core.strict import StrictModel
from gymfleet.envs.base import AgentEnv, Policy
from gymfleet.envs.browser.actions import GRAMMAR, parse_action, run_action
from gymfleet.envs.browser.chromium import CHROMIUM, BrowserHost, ChromiumConfig
from gymfleet.envs.browser.errors import BrowserActionError, BrowserStartError, BrowserTaskError, NoGoldPolicyError
from gymfleet.envs.browser.gold import gold_first
from gymfleet.envs.browser.guard import PageGuard
from gymfleet.envs.browser.hosts import BrowserHosts
from gymfleet.envs.browser.miniwob import MiniWoBTask, miniwob_html_dir, miniwob_task_names
from gymfleet.envs.browser.pages import PageSlot
from gymfleet.envs.browser.page_text import PageView, clean_data, forget_ids, observation_text, snapshot_nodes
from gymfleet.envs.browser.tasks import BrowserTask, TaskOutcome

if TYPE_CHECKING:
    from gymfleet.envs.resources import EnvResources

T = TypeVar("T")

SYSTEM_PROMPT = f"""You operate a web browser to complete a task.
Each turn you see the task and the page as a tree: one element per line, `[id] role "name"`,
with value= and states (focused, checked, selected, disabled) after it.
Answer with exactly one action per turn, addressing elements by the id in brackets:
  {GRAMMAR}
The episode ends when the page says the task is done, or at the turn or time limit."""

BRIEF_SYSTEM_PROMPT = f"""Answer with one browser action, addressing an element by its [id]:
  {GRAMMAR}"""
"""``prompt: brief``: the action grammar alone (about 60 tokens, not 150), for one-action tasks
a small model learns from demonstrations; on a CPU the prompt is most of a step's cost."""

SYSTEM_PROMPTS = {"full": SYSTEM_PROMPT, "brief": BRIEF_SYSTEM_PROMPT}
"""The system prompts :class:`BrowserEnvConfig` picks by name."""

_RAF_JS = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
_SETTLE_TRIES = 20
"""Reads of a page that navigated under them (a reload loop) are tried this often, each after
its new document loaded, before the step reads nothing of it."""
_NAVIGATED = ("Execution context was destroyed", "Cannot find context with specified id",
              "Frame was detached", "navigating and changing the content")


class BrowserEnvConfig(StrictModel):
    """Arguments of :class:`BrowserEnv` (strings from the command line are coerced)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tasks: list[str | BrowserTask] | None = None
    """MiniWoB task names or task objects this env plays, in ``instance_ids()`` order; None
    plays every MiniWoB task, those with a scripted gold policy first."""
    sandbox: Literal["auto", "local", "docker"] = "local"
    """Where Chromium runs: a local process (default: the agent only clicks and types, it runs
    no code), a ``gymfleet/browser`` container, or ``auto`` (Docker when its daemon answers and
    the image is built)."""
    max_turns: int = Field(20, ge=1)
    """Actions per episode before it is truncated."""
    time_limit_s: float = Field(120.0, gt=0)
    """Wall seconds per episode before it is truncated (checked after each action)."""
    action_timeout_s: float = Field(2.0, gt=0)
    """Seconds Playwright waits for an element to become actionable."""
    start_timeout_s: float = Field(30.0, gt=0)
    """Seconds a task page may take to load and set up."""
    step_timeout_s: float = Field(15.0, gt=0)
    """Seconds one step may take in all: the action, the page settling, judging and reading it.
    A page that does not answer in time (a handler stuck in ``while(true){}``) ends the
    episode, truncated with reward 0, and its context is closed (which stops its renderer)."""
    viewport_width: int = 332
    """Page width, CSS pixels (MiniWoB's task area is 160 x 210 at the top left)."""
    viewport_height: int = 214
    """Page height, CSS pixels."""
    screenshot_scale: float = 2.0
    """Device pixels per CSS pixel in screenshots (2 makes them readable); pages render at 1
    when ``screenshots_dir`` is not set."""
    screenshots_dir: Path | None = None
    """When set, a PNG after reset and after each action at
    ``<screenshots_dir>/<env id>/<instance id>/turn-NN.png`` (``info["screenshot_path"]``),
    emptied at each reset."""
    pages_dirs: list[Path] = Field(default_factory=list)
    """Folders of this machine whose files URL tasks load by ``file://`` (copied into the
    container with Docker; MiniWoB's own folder is always there)."""
    chromium: ChromiumConfig = Field(default_factory=ChromiumConfig)
    """How Chromium is started."""
    max_observation_chars: int = Field(32_000, ge=1_000)
    """Most characters of one observation (about 8,000 tokens). A page whose text is longer after
    an action ends the episode as the policy's doing (terminated, reward 0, ``info``'s
    ``oversize_observation_chars``), its observation cut to this size; a page that is too long
    at reset (the task's own) is cut the same way, and the episode goes on."""
    prompt: Literal["full", "brief"] = "full"
    """The system prompt: ``full`` (how the page is shown and the action grammar) or ``brief``
    (the grammar alone; the default training run's MiniWoB task uses it)."""


class BrowserEnv(AgentEnv):
    """Web tasks in Chromium: MiniWoB++ (``gymfleet/miniwob.<task>-v0``) or any URL task.

    Description:
        Each episode opens a task page in a browser context of its own (fresh, or reused from
        the pool once scrubbed of the last episode: :mod:`.pages`), seeds it, and lets the agent
        act on it one action per turn. A MiniWoB task's later episodes on a pooled page that
        still holds the task start inside it (MiniWoB's own in-page reset), as a fresh load
        of the same seed would. ``gymfleet/Browser-v0`` plays every MiniWoB++ task (the
        instance id names the task); ``gymfleet/miniwob.<task>-v0`` plays one.

    Observation:
        Text: ``Task: <instruction>``, then ``Page:`` and the page as an accessibility-style
        tree, one element per line ``[id] role "name" value="..." states`` (ids are stable
        for the life of an element), then what the last action did or why it failed.
        With ``screenshots_dir`` set, a PNG of the page after every turn (path in ``info``).

    Action:
        One call per turn: ``click(id)``, ``fill(id, "text")``, ``select(id, "option")``,
        ``press("Key")`` or ``press(id, "Key")``, ``scroll(dx, dy)`` or ``scroll(id, dx, dy)``,
        ``hover(id)``, ``noop()``. Malformed text or an unknown id is answered with an
        observation saying what was wrong (the turn still counts).

    Reward:
        From the page: for MiniWoB, 1.0 when the episode ends with raw reward exactly 1
        (``WOB_RAW_REWARD_GLOBAL``), else 0.0 — partial credit is not success. ``info`` has
        ``raw_reward`` and ``reason``; ``info["volatile"]["wob_reward"]`` the time-discounted
        score (it varies between runs: :mod:`gymfleet.envs.info`).

    Episode end:
        Terminated when the page says it is done (``WOB_DONE_GLOBAL``), or with reward 0 when
        an action left a page whose observation is over ``max_observation_chars`` (the policy's
        doing; the observation is cut to that size); truncated after ``max_turns`` actions or
        ``time_limit_s`` seconds.

    Arguments:
        See :class:`BrowserEnvConfig`; ``resources`` the run's
        :class:`~gymfleet.envs.resources.EnvResources` (one Chromium per process, a context
        per episode from its bounded page pool); ``host`` a started :class:`BrowserHost` to use instead (the env
        does not close it).

    Version history:
        v0: MiniWoB++ 1.1 pages, text observations, id-addressed actions; a browser context
        per episode on the process's one Chromium, reused once scrubbed, or restarted in place
        for the same MiniWoB task.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    noop_action: ClassVar[str] = "noop()"
    artifacts_kwarg: ClassVar[str | None] = "screenshots_dir"
    requires: ClassVar[frozenset[str]] = frozenset({"chromium"})
    machine_needs = (CHROMIUM,)
    config_class: ClassVar[type[BrowserEnvConfig]] = BrowserEnvConfig

    def __init__(self, host: BrowserHost | None = None, resources: EnvResources | None = None,
                 **kwargs: Any) -> None:
        super().__init__(resources)
        self.config = self.config_class(**kwargs)
        self.tasks = self._build_tasks(self.config.tasks)
        self._given_host = host
        self._host: BrowserHost | None = host
        self._context: Any = None
        self._page: Any = None
        self._task: BrowserTask | None = None
        self._seed = 0
        self._instance = ""
        self._turn = 0
        self._started_at = 0.0
        self._finished = False
        self._slot: PageSlot | None = None
        self._hosts: BrowserHosts | None = None
        self._guard = PageGuard([])
        self._instruction = ""
        self.restarted_in_page = False
        """Whether the last reset started its episode inside the page the last episode of the
        same task left (MiniWoB's in-page reset) rather than loading the task page."""

    @staticmethod
    def _build_tasks(tasks: list[str | BrowserTask] | None) -> dict[str, BrowserTask]:
        html_dir = miniwob_html_dir()
        names = tasks if tasks is not None else gold_first(miniwob_task_names(html_dir))
        built = [t if isinstance(t, BrowserTask) else MiniWoBTask(t, html_dir) for t in names]
        if not built:
            raise ValueError("BrowserEnv needs at least one task")
        return {t.name: t for t in built}

    @classmethod
    def requirements(cls, kwargs: Mapping[str, Any]) -> frozenset[str]:
        """Chromium; with ``sandbox: docker``, Docker too."""
        return cls.requires | ({"docker"} if kwargs.get("sandbox") == "docker" else set())

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPTS[self.config.prompt]

    def instance_ids(self) -> list[str]:
        return list(self.tasks)

    def accepts_instance(self, instance_id: str) -> bool:
        """A task name, or ``<task>@<seed>``: the task on a fixed page seed (a fixed layout and
        target), e.g. training on ``click-test-2@0..47`` and holding out ``click-test-2@1000``."""
        name, at, seed = instance_id.partition("@")
        return name in self.tasks and (not at or seed.isdigit())

    # ---- episode ----------------------------------------------------------------------

    async def reset_async(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        task, page_seed = self._pick(seed, options)
        self._instance = str((options or {}).get("instance_id") or task.name)
        try:
            return await self._reset(task, page_seed)
        except BaseException:  # no path leaves this episode's context open
            await self._close_context()
            raise

    async def _reset(self, task: BrowserTask, page_seed: int) -> tuple[str, dict[str, Any]]:
        await self._open_page(task)
        self._task, self._seed, self._turn, self._finished = task, page_seed, 0, False
        await self._start_task(task, page_seed)
        self._started_at = time.monotonic()
        self._clear_screenshots()
        try:
            async with asyncio.timeout(self.config.start_timeout_s):
                obs, _ = self._bounded(observation_text(await self._view()))
                return obs, await self._info(TaskOutcome())
        except TimeoutError:
            await self._close_context()
            raise BrowserTaskError(f"task {task.name!r}: the page did not answer within "
                                   f"{self.config.start_timeout_s:g} s after loading") from None

    async def _open_page(self, task: BrowserTask) -> None:
        """The episode's context (cookies, storage, pages) and page on the shared Chromium: from
        the resources' bounded pool (a fresh one, a scrubbed one, or one still holding
        ``task``'s page, :mod:`.pages`), or a fresh one on a given host; the last episode's is
        given back first."""
        await self._close_context(reusable=True)
        # Rasterised at the screenshots' scale only when someone keeps screenshots: at 2, every
        # repaint of every page costs four times the pixels.
        scale = self.config.screenshot_scale if self.config.screenshots_dir is not None else 1.0
        options = {"viewport": {"width": self.config.viewport_width, "height": self.config.viewport_height},
                   "device_scale_factor": scale}
        if self._given_host is not None:
            browser = await self._given_host.start()
            self._slot = await PageSlot.open(browser, browser.new_context, options)
        else:
            hosts = (await self.env_resources()).get(BrowserHosts)
            pages = (miniwob_html_dir(), *self.config.pages_dirs)
            self._host = await hosts.host(self.config.sandbox, self.config.chromium, pages)
            self._slot = await hosts.lease_page(self._host, task.page_key(self._host), **options)
            self._hosts = hosts
        self._guard = PageGuard(self._page_folders())
        self._slot.begin(self._guard, self.config.action_timeout_s)
        self._context, self._page = self._slot.context, self._slot.page

    def _page_folders(self) -> list[str]:
        """The folders whose files the episode's pages may load, as the browser sees them."""
        assert self._host is not None
        folders = []
        for folder in (miniwob_html_dir(), *self.config.pages_dirs):
            try:
                folders.append(urllib.parse.unquote(urllib.parse.urlsplit(self._host.file_url(Path(folder))).path))
            except BrowserStartError:  # not served by this host: none of its files load
                continue
        return folders

    async def _start_task(self, task: BrowserTask, page_seed: int) -> None:
        """Starts the episode under ``start_timeout_s`` (page loads get that long, not the
        shorter action timeout): in place when the page still holds the task's page and the
        task can restart there (:meth:`BrowserTask.restart`), else by loading it.

        Raises:
            BrowserTaskError: the page did not load or set up in time.
        """
        assert self._page is not None and self._host is not None
        self._page.set_default_timeout(self.config.start_timeout_s * 1000)
        page_key = task.page_key(self._host)
        try:
            async with asyncio.timeout(self.config.start_timeout_s):
                self.restarted_in_page = await self._restart_in_page(task, page_key, page_seed)
                if not self.restarted_in_page:
                    await task.start(self._page, self._host, page_seed)
                if page_key is not None and self._slot is not None:
                    await self._slot.hold(page_key)
        except (TimeoutError, PlaywrightError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise BrowserTaskError(
                f"task {task.name!r} did not load within {self.config.start_timeout_s:g} s: {first}"
            ) from exc
        finally:
            self._guard.lock()
            self._page.set_default_timeout(self.config.action_timeout_s * 1000)
            if self._slot is not None:
                self._slot.loaded()

    async def _restart_in_page(self, task: BrowserTask, page_key: str | None, page_seed: int) -> bool:
        """The episode started inside the page the slot still holds (its ids renumbered as on a
        fresh load); False when the slot holds nothing of the task or the task could not restart
        (then the page is scrubbed and the episode's guard is a fresh one, for a fresh load)."""
        slot = self._slot
        if page_key is None or slot is None or slot.holding != page_key:
            return False
        self._guard.admit(page_key)
        try:
            if await task.restart(self._page, page_seed):
                await forget_ids(self._page)
                return True
        except PlaywrightError:  # the page's scripts failed on what is left of it: load afresh
            pass
        await slot.scrub(self.config.start_timeout_s)
        self._guard = PageGuard(self._page_folders())
        slot.guard = self._guard
        return False

    def _pick(self, seed: int | None, options: dict[str, Any] | None) -> tuple[BrowserTask, int]:
        ids = self.instance_ids()
        wanted = (options or {}).get("instance_id")
        page_seed: int | None = seed
        if wanted is not None:
            name, _, at = str(wanted).partition("@")
            if name not in self.tasks or (at and not at.isdigit()):
                raise KeyError(f"unknown instance {wanted!r}: use one of {ids[:8]}... or 'name@seed'")
            page_seed = int(at) if at else page_seed
        else:
            name = ids[seed % len(ids)] if seed is not None else ids[int(self.np_random.integers(len(ids)))]
        if page_seed is None:
            page_seed = int(self.np_random.integers(2**31 - 1))
        return self.tasks[name], page_seed

    async def step_async(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None or (self._page is None and not self._finished):
            raise RuntimeError("call reset() before step()")
        if not self._finished:
            self._turn += 1
        try:
            async with asyncio.timeout(self.config.step_timeout_s):
                return await (self._over() if self._finished else self._step(action))
        except TimeoutError:
            return await self._hung()
        except BaseException:  # no path leaves this episode's context open
            self._finished = True
            await self._close_context()
            raise

    async def _over(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        note = "The episode is over: reset the env to start another."
        if self._page is None:  # closed after it hung
            return note, 0.0, True, False, {"instance_id": self._instance, "turn": self._turn}
        return self._bounded(observation_text(await self._view(), note))[0], 0.0, True, False, await self._info(TaskOutcome())

    async def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self._page is not None and self._task is not None
        feedback = await self._act(action)
        task = self._task
        outcome = await self._settled(lambda: task.outcome(self._page), TaskOutcome())
        elapsed_s = time.monotonic() - self._started_at
        truncated = not outcome.done and (
            self._turn >= self.config.max_turns or elapsed_s >= self.config.time_limit_s
        )
        self._finished = outcome.done or truncated
        feedback += self._ending(outcome, truncated, elapsed_s)
        obs, oversize_chars = self._bounded(observation_text(await self._view(), feedback))
        info = await self._info(outcome, truncated=truncated)
        if oversize_chars:  # the policy's doing: the episode ends here, earning nothing
            self._finished = True
            info.update(oversize_observation_chars=oversize_chars, success=False, truncated=False,
                        reason=f"the page's text grew to {oversize_chars} characters")
            return obs, 0.0, True, False, info
        return obs, outcome.reward if outcome.done else 0.0, outcome.done, truncated, info

    def _bounded(self, obs: str) -> tuple[str, int]:
        """``obs`` cut to ``max_observation_chars`` with a note saying so, and its full length
        when it was cut (else 0)."""
        limit = self.config.max_observation_chars
        if len(obs) <= limit:
            return obs, 0
        note = (f"\n[observation cut: the page's text is {len(obs)} characters, over "
                f"max_observation_chars={limit}; episode over]\n")
        return obs[: limit - len(note)] + note, len(obs)

    async def _hung(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The page did not answer within the step timeout: the episode ends (truncated, reward 0)
        and the context goes, stopping the page's renderer (the next reset opens a fresh one)."""
        self._finished = True
        await self._close_context()
        why = (f"the page did not answer within step_timeout_s={self.config.step_timeout_s:g} "
               "(a script on it kept running)")
        info = {"instance_id": self._instance, "task": self._task.name if self._task else "",
                "seed": self._seed, "turn": self._turn, "success": False, "truncated": True,
                "reason": why, "popups_closed": self._popups_closed(),
                "browser": self._host.name if self._host else ""}
        return f"Episode over: {why}.", 0.0, False, True, clean_data(info)

    async def _act(self, action: str) -> str:
        try:
            parsed = parse_action(action)
            summary = await run_action(self._page, parsed, self.config.action_timeout_s)
        except BrowserActionError as exc:
            return f"Last action failed: {exc}"
        try:
            await self._page.evaluate(_RAF_JS)  # let the page's handlers and repaint run
        except Exception:  # the action navigated away; the next read waits for the new page
            await self._page.wait_for_load_state()
        return f"Last action: {summary}."

    def _ending(self, outcome: TaskOutcome, truncated: bool, elapsed_s: float) -> str:
        if outcome.done:
            verdict = "success" if outcome.reward >= 1.0 else "failure"
            reason = f", {outcome.reason}" if outcome.reason else ""
            return f"\nEpisode over: {verdict} (page reward {outcome.raw_reward}{reason})."
        if truncated:
            limit = (
                f"turn limit ({self.config.max_turns})"
                if self._turn >= self.config.max_turns
                else f"time limit ({self.config.time_limit_s:g} s, {elapsed_s:.1f} s used)"
            )
            return f"\nEpisode over: {limit} reached."
        return ""

    async def _view(self) -> PageView:
        assert self._task is not None
        task = self._task

        async def read() -> PageView:
            nodes = await snapshot_nodes(self._page, task.skip_dom_ids)
            return PageView(await task.instruction(self._page), nodes)

        view = await self._settled(read, None)
        if view is None:  # it never held still: the last instruction, no elements
            return PageView(self._instruction, [])
        self._instruction = view.instruction
        return view

    async def _settled(self, read: Callable[[], Awaitable[T]], fallback: T) -> T:
        """``read()`` of a page that may be navigating (a reload loop destroys the document
        under a read): tried again once the new document loaded, up to :data:`_SETTLE_TRIES`
        times; then ``fallback`` (the step timeout bounds the whole)."""
        for _ in range(_SETTLE_TRIES):
            try:
                return await read()
            except PlaywrightError as exc:
                if not any(words in str(exc) for words in _NAVIGATED):
                    raise
            try:
                await self._page.wait_for_load_state("load")
            except PlaywrightError:
                pass
        return fallback

    async def _info(self, outcome: TaskOutcome, truncated: bool = False) -> dict[str, Any]:
        assert self._task is not None and self._host is not None
        info: dict[str, Any] = {
            "instance_id": self._instance,
            "task": self._task.name,
            "seed": self._seed,
            "turn": self._turn,
            "raw_reward": outcome.raw_reward,
            "reason": outcome.reason,
            "success": outcome.done and outcome.reward >= 1.0,
            "truncated": truncated,
            "browser": self._host.name,
            "popups_closed": self._popups_closed(),
            **outcome.details,
        }
        if self.config.screenshots_dir is not None:
            info["screenshot_path"] = str(await self.screenshot())
        return clean_data(info)

    # ---- screenshots ------------------------------------------------------------------

    def screenshots_folder(self) -> Path:
        """Where this episode's PNGs go: ``<screenshots_dir>/<env id>/<instance id>/`` (the
        instance id as the caller gave it: ``click-button`` or ``click-button@7``)."""
        if self.config.screenshots_dir is None or self._task is None:
            raise RuntimeError("screenshots_dir is not set, or no episode has started")
        env_id = self.spec.id if self.spec is not None else "browser"
        slug = re.sub(r"[^\w.@-]+", "_", env_id)
        return self.config.screenshots_dir / slug / self._instance

    def _clear_screenshots(self) -> None:
        if self.config.screenshots_dir is not None:
            shutil.rmtree(self.screenshots_folder(), ignore_errors=True)

    async def screenshot(self, path: Path | None = None) -> Path:
        """Saves a PNG of the page (to ``turn-NN.png`` in :meth:`screenshots_folder` by default)."""
        path = path or self.screenshots_folder() / f"turn-{self._turn:02d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        await self._page.screenshot(path=str(path))
        return path

    # ---- the rest of the contract -----------------------------------------------------

    def gold_policy(self, instance_id: str | None = None) -> Policy:
        if instance_id is None:
            if self._task is None:
                raise RuntimeError("gold_policy() without an instance id needs an episode: "
                                   "call reset() first, or pass the instance id")
            task = self._task
        else:
            name = instance_id.partition("@")[0]
            if name not in self.tasks:
                raise KeyError(f"unknown instance {instance_id!r}: use one of {self.instance_ids()[:8]}...")
            task = self.tasks[name]
        policy = task.gold_policy()
        if policy is None:
            raise NoGoldPolicyError(
                f"task {task.name!r} has no scripted gold policy; tasks with one: "
                f"{', '.join(self.gold_instance_ids()) or 'none'}"
            )
        return policy

    def gold_instance_ids(self) -> list[str]:
        """The instances whose task has a scripted gold policy."""
        return [name for name, task in self.tasks.items() if task.gold_policy() is not None]

    def _popups_closed(self) -> int:
        return self._slot.popups_closed if self._slot is not None else 0

    async def _close_context(self, reusable: bool = False) -> None:
        """Ends the episode's lease of its context: back to the pool, scrubbed, when
        ``reusable`` (reset or close, not an error or a hung page), else closed."""
        slot, hosts = self._slot, self._hosts
        self._slot, self._hosts, self._context, self._page = None, None, None, None
        if slot is None:
            return
        if hosts is not None:
            await hosts.give_back_page(slot, reusable)
        else:
            await slot.close()

    async def close_async(self) -> None:
        await self._close_context(reusable=True)
        self._host = self._given_host
        await self.close_resources()
