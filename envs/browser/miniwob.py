"""MiniWoB++ tasks from the PyPI package ``miniwob``: discovery, episode set-up, reward, registry.

Every ``html/miniwob/<task>.html`` the package ships becomes a :class:`MiniWoBTask` and an
env id ``gymfleet/miniwob.<task>-v0``; ``gymfleet/Browser-v0`` plays any of them (the instance
id names the task). The page's own globals (``core.js``) give the reward:
``WOB_RAW_REWARD_GLOBAL`` (the task's score in [-1, 1]), ``WOB_REWARD_GLOBAL`` (the same
discounted by time) and ``WOB_DONE_GLOBAL``.

Success is a raw reward of exactly 1 (:func:`success_reward`): partial credit such as
find-greatest's 0.1 for a wrong card is a failure, unlike harnesses that count any raw
reward above 0.
"""

from __future__ import annotations

import importlib.util
import re
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium

from gymfleet.envs.browser.errors import BrowserTaskError
from gymfleet.envs.browser.tasks import BrowserTask, TaskOutcome
from gymfleet.envs.info import VOLATILE_KEY, Volatile

if TYPE_CHECKING:  # registration (envs/registration.py) may import this module mid-import of base
    from gymfleet.envs.base import Policy

ENV_ENTRY_POINT = "gymfleet.envs.browser.env:BrowserEnv"
GENERIC_ENV_ID = "gymfleet/Browser-v0"
HUD_DOM_IDS = ("reward-display", "sync-task-cover", "query", "click-canvas")
"""MiniWoB's own display (instruction, score, START cover): left out of the page text."""

NO_IN_PAGE_RESET: frozenset[str] = frozenset({"use-colorwheel", "use-colorwheel-2"})
"""Tasks whose in-page reset was seen to give a page other than a fresh load's for the same seed
(``tests/envs/browser/test_in_page_reset.py`` checks every other task): they load afresh. The
colour wheels' jscolor widget formats its field itself ("AB2567"), which a form reset bypasses."""

_DEFERRED_RE = re.compile(
    r"setTimeout|setInterval|requestAnimationFrame|\.transition\(|\.animate\(|fade(In|Out|To)|"
    r"slide(Up|Down|Toggle)|\.delay\(|d3\.timer|\.effect\(|\.(show|hide|toggle)\([^)]")
"""Script that runs later than the event that caused it (timers, animations). A task whose own
scripts have any restarts by a fresh load: in place, a callback the last episode left pending
would run in the next one (moving-items ends its episode 9.9 s after it started, with the
score of the clicks so far)."""
_SCRIPT_SRC_RE = re.compile(r'<script[^>]*\ssrc="(\.\./common/special/[^"]+\.js)"')

_HIDE_HUD_CSS = "#reward-display, #sync-task-cover { display: none !important; }"

# Seeds Math.random, gives the page's timer room, and starts the episode (what the START
# cover's click would do). EPISODE_MAX_TIME is ms.
_START_JS = """
({seed, maxMs, css}) => {
  const style = document.createElement('style');
  style.textContent = css;
  document.head.appendChild(style);
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = maxMs;
  core.startEpisodeReal();
  return WOB_TASK_READY;
}
"""
# MiniWoB's own in-page reset (as the reference MiniWoBInstance does between episodes): end an
# unfinished episode with reward 0 (its force_stop), then seed and start the next one; genProblem
# rebuilds the task area. What genProblem may not rebuild is reset here, as a fresh load has it:
# every form field's value, checkedness and selection (the form reset algorithm, through a
# hidden form for fields outside any form: focus-text-2 keeps its three inputs across episodes,
# with what the last policy typed), the focus, every scroll position, the page's local and
# session storage. Null when the page's MiniWoB core is not there (the env then loads afresh).
_RESTART_JS = """
({seed, maxMs}) => {
  if (typeof core !== 'object' || core === null || typeof core.startEpisodeReal !== 'function'
      || typeof core.endEpisode !== 'function' || typeof genProblem !== 'function'
      || typeof Math.seedrandom !== 'function') return null;
  if (core.EP_TIMER !== null) core.endEpisode(0, false, 'reset');
  try { localStorage.clear(); sessionStorage.clear(); } catch (e) {}
  const active = document.activeElement;
  if (active && active !== document.body && typeof active.blur === 'function') active.blur();
  const holder = document.createElement('form'), loose = [];
  holder.id = 'gf-reset-' + Date.now();
  document.body.appendChild(holder);
  for (const el of document.querySelectorAll('input, textarea, select')) {
    if (el.form) continue;
    loose.push([el, el.getAttribute('form')]);
    el.setAttribute('form', holder.id);
  }
  for (const form of Array.from(document.forms)) form.reset();
  for (const [el, owner] of loose) owner === null ? el.removeAttribute('form') : el.setAttribute('form', owner);
  holder.remove();
  for (const el of document.querySelectorAll('*')) {
    if (el.scrollTop) el.scrollTop = 0;
    if (el.scrollLeft) el.scrollLeft = 0;
  }
  window.scrollTo(0, 0);
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = maxMs;
  core.startEpisodeReal();
  return !!WOB_TASK_READY;
}
"""
_READ_JS = """
() => ({raw: WOB_RAW_REWARD_GLOBAL, reward: WOB_REWARD_GLOBAL, done: WOB_DONE_GLOBAL,
        reason: WOB_REWARD_REASON == null ? '' : String(WOB_REWARD_REASON)})
"""
_UTTERANCE_JS = """
() => { const u = core.getUtterance(); return typeof u === 'string' ? u : (u.utterance || ''); }
"""


def miniwob_html_dir() -> Path:
    """The ``html/`` folder of the installed ``miniwob`` package.

    Raises:
        BrowserTaskError: the package is not installed.
    """
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise BrowserTaskError(
            "the miniwob package is not installed: pip install 'gymfleet[browser]' (or miniwob)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "html"


def miniwob_task_names(html_dir: Path | None = None) -> list[str]:
    """Names of every MiniWoB++ task the package ships (``click-button``, ...), sorted."""
    folder = (html_dir or miniwob_html_dir()) / "miniwob"
    return sorted(p.stem for p in folder.glob("*.html"))


def success_reward(raw_reward: float | None, done: bool) -> float:
    """The env's reward from MiniWoB's raw reward: 1.0 only for a finished episode scoring 1.

    Args:
        raw_reward: ``WOB_RAW_REWARD_GLOBAL`` (-1 failure, partial credit in (0, 1), 1 success).
        done: ``WOB_DONE_GLOBAL``.
    """
    return 1.0 if done and raw_reward is not None and raw_reward >= 1.0 - 1e-9 else 0.0


class MiniWoBTask(BrowserTask):
    """One MiniWoB++ task page, e.g. ``MiniWoBTask("click-button")``.

    Args:
        name: the task (the HTML file's stem).
        html_dir: the package's ``html/`` folder (found when None).
        page_time_limit_s: the page's own episode timer; kept above the env's time limit so
            that the env, not the page, truncates.
    """

    skip_dom_ids = HUD_DOM_IDS

    def __init__(self, name: str, html_dir: Path | None = None, page_time_limit_s: float = 3600.0):
        self.name = name
        self.html_dir = html_dir or miniwob_html_dir()
        self.page_time_limit_s = page_time_limit_s

    @property
    def path(self) -> Path:
        return self.html_dir / "miniwob" / f"{self.name}.html"

    async def start(self, page: Any, host: Any, seed: int) -> None:
        if not self.path.exists():
            raise BrowserTaskError(
                f"no MiniWoB task {self.name!r} at {self.path}; known tasks: "
                f"{', '.join(miniwob_task_names(self.html_dir)[:10])}, ..."
            )
        await page.goto(host.file_url(self.path), wait_until="load")
        try:
            await page.wait_for_function(
                "() => typeof core !== 'undefined' && typeof Math.seedrandom === 'function'"
            )
        except Exception as exc:
            raise BrowserTaskError(f"{self.name}: MiniWoB core.js did not load: {exc}") from exc
        args = {"seed": seed, "maxMs": int(self.page_time_limit_s * 1000), "css": _HIDE_HUD_CSS}
        if not await page.evaluate(_START_JS, args):
            await page.wait_for_function("() => WOB_TASK_READY")

    @cached_property
    def restarts_in_page(self) -> bool:
        """Whether episodes after the first start inside the loaded page (:meth:`restart`):
        unless the task's own scripts (its page and its ``common/special`` libraries) defer
        work to timers or animations (``_DEFERRED_RE``), or it is in :data:`NO_IN_PAGE_RESET`."""
        if self.name in NO_IN_PAGE_RESET or not self.path.exists():
            return False
        html = self.path.read_text(encoding="utf-8", errors="replace")
        scripts = [html] + [(self.path.parent / src).read_text(encoding="utf-8", errors="replace")
                            for src in _SCRIPT_SRC_RE.findall(html) if (self.path.parent / src).exists()]
        return not any(_DEFERRED_RE.search(text) for text in scripts)

    def page_key(self, host: Any) -> str | None:
        """The task page's ``file://`` URL on ``host`` when :attr:`restarts_in_page`, else None."""
        return host.file_url(self.path) if self.restarts_in_page else None

    async def restart(self, page: Any, seed: int) -> bool:
        """MiniWoB's in-page reset (``_RESTART_JS``): ``Math.seedrandom(seed)`` then
        ``core.startEpisodeReal()`` in the loaded page, an unfinished episode ended first with
        reward 0; the same seed gives the page a fresh load gives. False when the page's core
        is missing."""
        args = {"seed": seed, "maxMs": int(self.page_time_limit_s * 1000)}
        ready = await page.evaluate(_RESTART_JS, args)
        if ready is None:
            return False
        if not ready:
            await page.wait_for_function("() => WOB_TASK_READY")
        return True

    async def instruction(self, page: Any) -> str:
        return str(await page.evaluate(_UTTERANCE_JS))

    async def outcome(self, page: Any) -> TaskOutcome:
        g = await page.evaluate(_READ_JS)
        raw = float(g["raw"]) if g["raw"] is not None else None
        done = bool(g["done"])
        return TaskOutcome(
            reward=success_reward(raw, done),
            done=done,
            raw_reward=raw,
            reason=g["reason"],
            details={VOLATILE_KEY: Volatile(wob_reward=g["reward"])},  # time-discounted
        )

    def gold_policy(self) -> Policy | None:
        from gymfleet.envs.browser.gold import gold_policy_for

        return gold_policy_for(self.name)


def env_id_for(task_name: str) -> str:
    """``click-button`` -> ``gymfleet/miniwob.click-button-v0``."""
    return f"gymfleet/miniwob.{task_name}-v0"


def register_envs() -> None:
    """Registers ``gymfleet/Browser-v0`` (every task) and one ``gymfleet/miniwob.<task>-v0`` per
    task with a scripted gold policy.

    Idempotent; registers nothing (quietly) when the ``miniwob`` package is missing.
    """
    if importlib.util.find_spec("miniwob") is None or importlib.util.find_spec("playwright") is None:
        return
    ids: dict[str, dict[str, Any]] = {GENERIC_ENV_ID: {}}
    # One id per task that has a gold policy: an id must pass `envs check` (gold earns 1); the
    # other tasks are played through the generic id (instance = task name).
    from gymfleet.envs.browser.gold import SOLVERS

    ids.update({env_id_for(name): {"tasks": [name]} for name in miniwob_task_names() if name in SOLVERS})
    for env_id, kwargs in ids.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=ENV_ENTRY_POINT, kwargs=kwargs)
