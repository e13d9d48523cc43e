"""SlidesEnv (``gymfleet/Slides-v0``): write an HTML deck from a brief; scored on Chromium's render."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeAlias

from gymfleet.envs.browser.chromium import CHROMIUM, ChromiumConfig
from gymfleet.envs.browser.hosts import BrowserHosts
from gymfleet.envs.errors import SandboxFileError
from gymfleet.envs.info import VOLATILE_KEY, Volatile, add_volatile
from gymfleet.envs.resources import Catalogue, EnvResources
from gymfleet.envs.sandbox.base import SandboxBackend, SandboxSpec
from gymfleet.envs.sandbox_env import Graded, SandboxEnv, SandboxEnvConfig, SandboxEpisode
from gymfleet.envs.slides import prompts
from gymfleet.envs.slides.actions import FORMAT_HELP, bash_block
from gymfleet.envs.slides.brief import Brief, gold_deck, load_briefs
from gymfleet.envs.slides.checks import CheckConfig, Scorecard, score_deck
from gymfleet.envs.slides.feedback import render_text
from gymfleet.envs.slides.records import RenderReport
from gymfleet.envs.slides.render import DeckRenderer, RenderConfig

DECK_FILE = "deck.html"


class SlideBriefs(Catalogue[str, dict[str, Brief]]):
    """Parsed briefs by folder, once per process (``resources.get(SlideBriefs)``)."""


@dataclass
class SlidesState:
    """What a slides episode keeps besides its sandbox.

    Attributes:
        n_renders: ``render`` words so far (each render's pictures go to their own folder).
    """

    n_renders: int = 0


Episode: TypeAlias = SandboxEpisode[Brief, SlidesState]


class SlidesEnvConfig(SandboxEnvConfig):
    """Arguments of :class:`SlidesEnv` (strings from ``--env-arg`` are coerced)."""

    image: str = "base"
    """Docker image of the sandbox (needs only bash): a folder under ``images/``, built when
    missing and used by its content-hash tag, or a full reference containing ``:``. The local
    backend ignores it."""
    briefs_dir: Path | None = None
    """Folder of ``<id>.yaml`` briefs and ``gold/<id>.html``; the shipped 20 by default."""
    runs_dir: Path = Path("runs/slides")
    """(``gymfleet rollout --artifacts-dir`` sets it.) PNGs go to ``<runs_dir>/<instance_id>-<rollout_id>/slide-NN.png`` (the submitted deck,
    next to the submitted ``deck.html``) and to ``render-KK/`` under it (each ``render``)."""
    max_turns: int = 30
    """At this many turns the deck as it stands is scored and the episode is truncated."""
    command_timeout_s: float = 60.0
    """Limit of one bash block."""
    max_observation_chars: int = 12_000
    """Longer command output is cut to its head and tail."""
    chromium: str | None = None
    """Chromium binary; None: ``$GYMFLEET_CHROMIUM`` or ``chromium`` on PATH."""


class SlidesEnv(SandboxEnv[Brief, SlidesState]):
    """Slide decks: the agent writes ``deck.html`` for a brief; the rendered deck is scored.

    ## Description
    Each instance is a brief (``envs/slides/briefs/<id>.yaml``): topic, audience, the exact
    number of slides and the points that must appear. The agent writes an HTML deck in its
    sandbox, one ``<section class="slide">`` per slide. The env copies ``deck.html`` out with
    ``get_file`` and renders it on the host in headless Chromium, each slide alone in a
    1280x720 frame, with page scripts off and the network blocked (rendering in the host's
    Chromium keeps the sandbox image small and the grader out of the agent's reach). Each
    render saves one PNG per slide.

    ## Observation
    Text. First the brief; after a bash block its exit code and output; after ``render`` the
    text report (every check and its detail, what each slide shows or hides); after a
    malformed turn, the format.

    ## Action
    Text: one fenced ```` ```bash ```` block (run in the working folder), or ``render``, or
    ``submit``. ``noop_action`` is ``"submit"`` (with no deck: reward 0).

    ## Reward
    0 on every step but the last; on ``submit`` the weighted share of checks passed
    (``checks.WEIGHTS``: slide count, titles, required points, fits the frame, no overlap,
    legible text, balanced whitespace, no hidden text), in [0, 1]. Only visible, legible
    text on sound slides counts; ``info["checks"]`` has each check's score and detail, and
    ``info["volatile"]`` (:mod:`gymfleet.envs.info`: values that differ between runs) the
    ``rollout_id``, ``png_dir`` and ``render_s`` (seconds).

    ## Episode end
    Terminated on ``submit``. Truncated after ``max_turns`` turns; the deck as it stands is
    scored then, so the last step carries the reward either way.

    ## Arguments
    See :class:`SlidesEnvConfig`; ``sandbox`` may also be a ``SandboxBackend`` object,
    ``resources`` the run's :class:`~gymfleet.envs.resources.EnvResources` (decks render in its
    one Chromium, which the browser envs share), and ``renderer`` a started
    :class:`DeckRenderer` to render with instead.

    ## Version history
    * v0: initial version (20 briefs with gold decks); on :class:`SandboxEnv`, rendering in
      the shared Chromium.
    """

    requires: ClassVar[frozenset[str]] = frozenset({"sandbox", "chromium"})
    machine_needs = (CHROMIUM,)
    artifacts_kwarg = "runs_dir"
    config_class = SlidesEnvConfig
    config: SlidesEnvConfig
    words: ClassVar[tuple[str, ...]] = ("render",)
    format_help: ClassVar[str] = FORMAT_HELP
    submitted_note: ClassVar[str] = "Submitted."
    turn_limit_note: ClassVar[str] = "Turn limit ({limit}) reached: the deck is scored as it stands."

    def __init__(self, sandbox: str | SandboxBackend = "auto", renderer: DeckRenderer | None = None,
                 resources: EnvResources | None = None, **kwargs: Any) -> None:
        super().__init__(sandbox, resources, **kwargs)
        key = str(self.config.briefs_dir)
        load = lambda: load_briefs(self.config.briefs_dir)  # noqa: E731
        self.briefs: dict[str, Brief] = resources.get(SlideBriefs).load(key, load) if resources else load()
        self.check_config = CheckConfig()
        self.render_config = RenderConfig(executable_path=self.config.chromium)
        self._renderer = renderer

    @property
    def system_prompt(self) -> str:
        return prompts.SYSTEM_PROMPT

    def instances(self) -> dict[str, Brief]:
        return self.briefs

    def gold_actions(self, instance: Brief) -> list[str]:
        html = gold_deck(instance.id, self.config.briefs_dir)
        return [bash_block(f"cat > {DECK_FILE} <<'GYMFLEET_DECK'\n{html.rstrip()}\nGYMFLEET_DECK"), "submit"]

    def max_turns(self, ep: Episode) -> int:
        return self.config.max_turns

    def step_info(self, ep: Episode) -> dict[str, Any]:
        return {"instance_id": ep.instance_id, "turn": ep.turn, VOLATILE_KEY: Volatile(rollout_id=ep.rollout_id)}

    async def sandbox_spec(self, instance: Brief, backend: str) -> SandboxSpec:
        return SandboxSpec(image=await self.image(self.config.image, backend))

    async def prepare(self, ep: Episode) -> tuple[str, dict[str, Any]]:
        ep.state = SlidesState()
        return prompts.first_observation(ep.instance), {"n_slides": ep.instance.n_slides}

    async def command(self, ep: Episode, script: str, info: dict[str, Any]) -> str:
        result = await ep.sandbox.exec(script, timeout_s=self.config.command_timeout_s)
        info.update(exit_code=result.exit_code, timed_out=result.timed_out)
        return prompts.command_observation(result, self.config.max_observation_chars)

    async def word(self, ep: Episode, word: str, info: dict[str, Any]) -> str:
        ep.state.n_renders += 1
        report, card = await self._render(ep, self._run_dir(ep) / f"render-{ep.state.n_renders:02d}")
        info["reward_if_submitted"] = card.reward
        add_volatile(info, png_dir=_png_dir(report), render_s=round(report.render_s, 3))
        return _cut(render_text(report, card, self.check_config), self.config.max_observation_chars)

    async def grade(self, ep: Episode, why: str) -> Graded:
        report, card = await self._render(ep, self._run_dir(ep))
        png_dir = _png_dir(report)
        info = {
            "reward": card.reward, "n_slides": report.n_slides, "render_error": report.error,
            "checks": {c.name: {"score": c.score, "weight": c.weight, "detail": c.detail} for c in card.checks},
            VOLATILE_KEY: Volatile(png_dir=png_dir, render_s=round(report.render_s, 3)),
        }
        where = f" Slides as PNG: {png_dir}" if png_dir else ""
        text = render_text(report, card, self.check_config)
        obs = _cut(f"{why}\nReward {card.reward:.3f}.{where}\n{text}", self.config.max_observation_chars)
        return Graded(card.reward, obs, info)

    # ---- helpers -------------------------------------------------------------------------

    async def renderer(self) -> DeckRenderer:
        """The given renderer, else one on the resources' shared Chromium."""
        if self._renderer is not None:
            return self._renderer
        chromium = ChromiumConfig(executable_path=self.config.chromium) if self.config.chromium else None
        browser = await (await self.env_resources()).get(BrowserHosts).browser("local", chromium)
        return DeckRenderer(self.render_config, browser=browser)

    def _run_dir(self, ep: Episode) -> Path:
        return self.config.runs_dir / f"{ep.instance_id}-{ep.rollout_id}"

    async def _render(self, ep: Episode, png_dir: Path) -> tuple[RenderReport, Scorecard]:
        """Copies deck.html out of the sandbox and renders it; a missing deck is a report error."""
        try:
            raw = await ep.sandbox.get_file(DECK_FILE)
        except SandboxFileError as exc:
            cfg = self.render_config
            report = RenderReport(width_px=cfg.width_px, height_px=cfg.height_px, n_slides=0,
                                  error=f"no {DECK_FILE} in the working folder ({exc})")
            return report, score_deck(report, ep.instance, self.check_config)
        png_dir.mkdir(parents=True, exist_ok=True)
        (png_dir / DECK_FILE).write_bytes(raw)
        report = await (await self.renderer()).render(raw.decode("utf-8", errors="replace"), png_dir)
        return report, score_deck(report, ep.instance, self.check_config)


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + f"\n[... {len(text) - max_chars} more characters]"


def _png_dir(report: RenderReport) -> str | None:
    paths = [s.png_path for s in report.slides if s.png_path]
    return str(Path(paths[0]).parent) if paths else None
