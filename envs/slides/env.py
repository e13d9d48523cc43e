"""SlidesEnv (``gymfleet/Slides-v0``): write an HTML deck from a brief; scored on Chromium's render."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from gymfleet.envs.base import AgentEnv, Policy, ScriptedPolicy
from gymfleet.envs.errors import SandboxFileError
from gymfleet.envs.sandbox import get_backend
from gymfleet.envs.sandbox.base import Sandbox, SandboxBackend, SandboxLabels, SandboxSpec
from gymfleet.envs.slides import prompts
from gymfleet.envs.slides.actions import Command, Render, Submit, bash_block, parse_action
from gymfleet.envs.slides.brief import Brief, default_briefs_dir, gold_deck, load_briefs
from gymfleet.envs.slides.checks import CheckConfig, Scorecard, score_deck
from gymfleet.envs.slides.feedback import render_text
from gymfleet.envs.slides.records import RenderReport
from gymfleet.envs.slides.render import DeckRenderer, RenderConfig

DECK_FILE = "deck.html"


class SlidesEnvConfig(BaseModel):
    """Arguments of :class:`SlidesEnv` (strings from ``--env-arg`` are coerced)."""

    model_config = ConfigDict(extra="forbid")

    sandbox: str = "auto"
    """Sandbox backend: ``auto`` (Docker when a daemon answers, else local), ``docker``, ``local``."""
    image: str = "base"
    """Docker image of the sandbox (needs only bash): a folder under ``images/``, built when
    missing and used by its content-hash tag, or a full reference containing ``:``. The local
    backend ignores it."""
    briefs_dir: Path | None = None
    """Folder of ``<id>.yaml`` briefs and ``gold/<id>.html``; the shipped 20 by default."""
    runs_dir: Path = Path("runs/slides")
    """(``gymfleet rollout --artifacts-dir`` sets it.) PNGs go to ``<runs_dir>/<instance_id>-<rollout_id>/slide-NN.png`` (the submitted deck,
    next to the submitted ``deck.html``) and to ``render-KK/`` under it (each ``render``)."""
    run_id: str = "adhoc"
    """Label put on every sandbox, so that a run's leftovers can be reaped."""
    max_turns: int = 30
    """At this many turns the deck as it stands is scored and the episode is truncated."""
    command_timeout_s: float = 60.0
    """Limit of one bash block."""
    max_observation_chars: int = 12_000
    """Longer command output is cut to its head and tail."""
    chromium: str | None = None
    """Chromium binary; None: ``$GYMFLEET_CHROMIUM`` or ``chromium`` on PATH."""


@dataclass
class _Episode:
    brief: Brief
    sandbox: Sandbox
    rollout_id: str
    n_renders: int = 0
    turn: int = 0
    done: bool = False


class SlidesEnv(AgentEnv):
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
    text on sound slides counts; ``info["checks"]`` has each check's score and detail.

    ## Episode end
    Terminated on ``submit``. Truncated after ``max_turns`` turns; the deck as it stands is
    scored then, so the last step carries the reward either way.

    ## Arguments
    See :class:`SlidesEnvConfig`; ``sandbox`` may also be a ``SandboxBackend`` object, and
    ``renderer`` a started :class:`DeckRenderer` to share one Chromium between envs.

    ## Version history
    * v0: initial version (20 briefs with gold decks).
    """

    noop_action = "submit"
    artifacts_kwarg = "runs_dir"

    def __init__(self, sandbox: str | SandboxBackend = "auto", renderer: DeckRenderer | None = None,
                 **kwargs: Any) -> None:
        super().__init__()
        name = sandbox if isinstance(sandbox, str) else sandbox.name
        self.config = SlidesEnvConfig(sandbox=name, **kwargs)
        self.briefs = load_briefs(self.config.briefs_dir)
        self.check_config = CheckConfig()
        self._backend: SandboxBackend | None = None if isinstance(sandbox, str) else sandbox
        self._own_renderer = renderer is None
        self._renderer = renderer or DeckRenderer(RenderConfig(executable_path=self.config.chromium))
        self._episode: _Episode | None = None
        self._image_tag: str | None = None

    @property
    def system_prompt(self) -> str:
        return prompts.SYSTEM_PROMPT

    def instance_ids(self) -> list[str]:
        return list(self.briefs)

    @property
    def backend(self) -> SandboxBackend:
        """The sandbox backend, resolved on first use (so that listing ids needs none)."""
        if self._backend is None:
            self._backend = get_backend(self.config.sandbox)
        return self._backend

    async def reset_async(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        await self._close_episode()
        brief = self._pick(seed, options)
        rollout_id = uuid.uuid4().hex[:12]
        spec = SandboxSpec(image=await self._image())
        sandbox = self.backend.create(spec, SandboxLabels(run_id=self.config.run_id, rollout_id=rollout_id))
        try:
            await sandbox.start()
        except BaseException:
            await sandbox.close()
            raise
        self._episode = _Episode(brief, sandbox, rollout_id)
        info = {"instance_id": brief.id, "rollout_id": rollout_id, "n_slides": brief.n_slides,
                "sandbox": self.backend.name, "isolated": sandbox.isolated}
        return prompts.first_observation(brief), info

    async def step_async(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        ep = self._episode
        if ep is None or ep.done:
            raise RuntimeError("SlidesEnv.step called without an episode in progress: call reset() first")
        ep.turn += 1
        info: dict[str, Any] = {"instance_id": ep.brief.id, "rollout_id": ep.rollout_id, "turn": ep.turn}
        parsed = parse_action(action)
        if isinstance(parsed, Submit):
            return await self._submit(ep, info, "Submitted.", truncated=False)
        if isinstance(parsed, Command):
            result = await ep.sandbox.exec(parsed.script, timeout_s=self.config.command_timeout_s)
            info.update(exit_code=result.exit_code, timed_out=result.timed_out)
            obs = prompts.command_observation(result, self.config.max_observation_chars)
        elif isinstance(parsed, Render):
            ep.n_renders += 1
            report, card = await self._render(ep, self._run_dir(ep) / f"render-{ep.n_renders:02d}")
            info.update(reward_if_submitted=card.reward, png_dir=_png_dir(report))
            obs = _cut(render_text(report, card, self.check_config), self.config.max_observation_chars)
        else:
            info["malformed"] = parsed.reason
            obs = parsed.reason
        if ep.turn >= self.config.max_turns:
            why = f"{obs}\n\nTurn limit ({self.config.max_turns}) reached: the deck is scored as it stands."
            return await self._submit(ep, info, why, truncated=True)
        return obs, 0.0, False, False, info

    async def end_async(self, reason: str) -> tuple[float, dict[str, Any]]:
        """Scores the deck as it stands (the caller's turn limit came first), as ``max_turns`` does."""
        ep = self._episode
        if ep is None or ep.done:
            return 0.0, {}
        info: dict[str, Any] = {"instance_id": ep.brief.id, "rollout_id": ep.rollout_id, "turn": ep.turn,
                                "ended_by_caller": reason}
        _, reward, _, _, info = await self._submit(ep, info, reason, truncated=True)
        return reward, info

    async def close_async(self) -> None:
        await self._close_episode()
        if self._own_renderer:
            await self._renderer.close()

    def gold_policy(self) -> Policy:
        if self._episode is None:
            raise RuntimeError("SlidesEnv.gold_policy needs an episode: call reset() first")
        html = gold_deck(self._episode.brief.id, self.config.briefs_dir)
        script = f"cat > {DECK_FILE} <<'GYMFLEET_DECK'\n{html.rstrip()}\nGYMFLEET_DECK"
        return ScriptedPolicy([bash_block(script), "submit"])

    # ---- helpers -------------------------------------------------------------------------

    def _pick(self, seed: int | None, options: dict[str, Any] | None) -> Brief:
        ids = self.instance_ids()
        if options and options.get("instance_id") is not None:
            instance_id = str(options["instance_id"])
            if instance_id not in self.briefs:
                raise KeyError(f"unknown slides brief {instance_id!r}; known: {', '.join(ids)}")
            return self.briefs[instance_id]
        index = seed if seed is not None else int(self.np_random.integers(len(ids)))
        return self.briefs[ids[index % len(ids)]]

    async def _image(self) -> str:
        """The sandbox image; on Docker, ``images/<image>`` is built first if missing."""
        name = self.config.image
        if ":" in name:
            return name
        if self.backend.name != "docker":
            return f"gymfleet/{name}:latest"
        if self._image_tag is not None:
            return self._image_tag
        from gymfleet.envs.images import ensure_image  # needs the docker SDK and a daemon

        tag = await asyncio.to_thread(ensure_image, name)
        self._image_tag = tag
        return tag

    def _run_dir(self, ep: _Episode) -> Path:
        return self.config.runs_dir / f"{ep.brief.id}-{ep.rollout_id}"

    async def _render(self, ep: _Episode, png_dir: Path) -> tuple[RenderReport, Scorecard]:
        """Copies deck.html out of the sandbox and renders it; a missing deck is a report error."""
        try:
            raw = await ep.sandbox.get_file(DECK_FILE)
        except SandboxFileError as exc:
            cfg = self._renderer.config
            report = RenderReport(width_px=cfg.width_px, height_px=cfg.height_px, n_slides=0,
                                  error=f"no {DECK_FILE} in the working folder ({exc})")
            return report, score_deck(report, ep.brief, self.check_config)
        png_dir.mkdir(parents=True, exist_ok=True)
        (png_dir / DECK_FILE).write_bytes(raw)
        report = await self._renderer.render(raw.decode("utf-8", errors="replace"), png_dir)
        return report, score_deck(report, ep.brief, self.check_config)

    async def _submit(self, ep: _Episode, info: dict[str, Any], why: str, *,
                      truncated: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        try:
            report, card = await self._render(ep, self._run_dir(ep))
        finally:
            ep.done = True
            await ep.sandbox.close()
        info.update(
            reward=card.reward, png_dir=_png_dir(report), n_slides=report.n_slides,
            render_s=round(report.render_s, 3), render_error=report.error,
            checks={c.name: {"score": c.score, "weight": c.weight, "detail": c.detail} for c in card.checks},
        )
        where = f" Slides as PNG: {info['png_dir']}" if info["png_dir"] else ""
        text = render_text(report, card, self.check_config)
        obs = _cut(f"{why}\nReward {card.reward:.3f}.{where}\n{text}", self.config.max_observation_chars)
        return obs, card.reward, not truncated, truncated, info

    async def _close_episode(self) -> None:
        ep, self._episode = self._episode, None
        if ep is not None:
            await ep.sandbox.close()  # idempotent: a submitted episode's sandbox is already closed


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + f"\n[... {len(text) - max_chars} more characters]"


def _png_dir(report: RenderReport) -> str | None:
    paths = [s.png_path for s in report.slides if s.png_path]
    return str(Path(paths[0]).parent) if paths else None
