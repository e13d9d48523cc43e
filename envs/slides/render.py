"""Rendering an HTML deck in Chromium, one 1280x720 frame per slide, into a RenderReport.

Deck format: one HTML document; every ``<section class="slide">`` is one slide. To render
slide *i* the renderer hides every other slide (inline ``display: none !important``), scrolls
to the origin and treats the 1280x720 viewport as the frame: whatever paints outside it is
off-frame. Page scripts are disabled, animations are finished, and every network request
other than ``data:`` URLs is refused, so a deck looks the same every time and cannot tell it
is being graded. Each slide is screenshotted twice: as is (saved as ``slide-NN.png``), and
with every glyph made transparent; the pixels that differ are the text's ink, which is what
"visible" means here (see :class:`~gymfleet.envs.slides.records.TextItem`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import re
import statistics
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from gymfleet.core.strict import StrictModel
from gymfleet.envs.slides.chromium import launch_chromium
from gymfleet.envs.slides.errors import RenderError
from gymfleet.envs.slides.records import ElementBox, Rect, RenderReport, SlideRender, TextItem


LINE_BOX_EM = 1.1
"""Smallest height of a text's line box, in font sizes, among common fonts (DejaVu Sans 1.16,
Liberation Sans 1.12): a box shorter than ``LINE_BOX_EM * font_px`` was shrunk by a transform."""


_META_REFRESH = re.compile(r"<meta\b[^>]*http-equiv\s*=\s*[\"']?\s*refresh[^>]*>", re.IGNORECASE)
"""A meta refresh tag, removed before rendering."""

class RenderConfig(StrictModel):
    """How decks are rendered."""

    width_px: int = 1280
    """Frame width, CSS px (16:9 with ``height_px``)."""
    height_px: int = 720
    """Frame height, CSS px."""
    max_slides: int = 60
    """Slides beyond this many are counted but not rendered."""
    max_html_bytes: int = 2_000_000
    """Larger decks are refused with a report error."""
    timeout_s: float = 30.0
    """Per page operation (load, measure, screenshot)."""
    deck_timeout_s: float = 120.0
    """Whole deck; a deck that takes longer (pathological CSS) is a report error, scored 0."""
    min_ink_delta: int = 40
    """A pixel is ink when some channel changes by at least this much (0-255)."""
    min_ink_density: float = 0.02
    """Visible text changes at least this share of its box's pixels."""
    max_inkless_fraction: float = 0.1
    """Visible text paints ink in all but this share of its stretches two font sizes wide (so
    covering most of a line and leaving a few words showing does not pass)."""
    min_shown_fraction: float = 0.98
    """Visible text has at least this share of its box inside the frame and its clips."""
    executable_path: str | None = None
    """Chromium binary; None for ``$GYMFLEET_CHROMIUM`` or ``chromium`` on PATH."""


def _script(name: str) -> str:
    return resources.files("gymfleet.envs.slides").joinpath(name).read_text()


class DeckRenderer:
    """Owns one headless Chromium; renders decks on fresh pages. An async context manager.

    ``async with DeckRenderer() as r: report = await r.render(html, png_dir)``

    Args:
        config: rendering settings.
        browser: a started Playwright ``Browser`` to render in (e.g. shared with the browser
            env's host); it is used as is and never closed here. None: launch our own Chromium.
    """

    def __init__(self, config: RenderConfig | None = None, browser: Any = None) -> None:
        self.config = config or RenderConfig()
        self._playwright: Any = None
        self._browser: Any = browser
        self._owns_browser = browser is None
        self._measure_js = _script("measure.js")
        self._inkless_js = _script("inkless.js")

    async def start(self) -> None:
        """Starts Chromium (idempotent).

        Raises:
            RenderError: Playwright is not installed or Chromium did not start.
        """
        if self._browser is not None:
            return
        try:
            from playwright.async_api import async_playwright
        except ImportError as exc:
            raise RenderError("playwright is missing: pip install 'gymfleet[browser]'") from exc
        self._playwright = await async_playwright().start()
        try:
            self._browser = await launch_chromium(self._playwright, self.config.executable_path)
        except BaseException:
            await self._playwright.stop()
            self._playwright = None
            raise

    async def close(self) -> None:
        """Stops Chromium (when launched here). Idempotent."""
        if self._browser is not None and self._owns_browser:
            with contextlib.suppress(Exception):  # already dead
                await self._browser.close()
            self._browser = None
        if self._playwright is not None:
            await self._playwright.stop()
            self._playwright = None

    async def __aenter__(self) -> DeckRenderer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def render(self, html: str, png_dir: Path | None = None) -> RenderReport:
        """Renders ``html`` slide by slide.

        Args:
            html: the whole deck document.
            png_dir: where to save ``slide-01.png``, ``slide-02.png``... (created); None to
                save nothing.

        Returns:
            The report; ``report.error`` says why when the deck could not be rendered at all.

        Raises:
            RenderError: Chromium could not start or died (infrastructure, not the deck's
                fault). A deck that breaks its page while Chromium lives on (navigates away,
                exceeds ``deck_timeout_s``) gives a report with ``error`` set instead.
        """
        cfg = self.config
        t0 = time.monotonic()
        if len(html.encode()) > cfg.max_html_bytes:
            return RenderReport(width_px=cfg.width_px, height_px=cfg.height_px, n_slides=0,
                                error=f"deck is larger than {cfg.max_html_bytes} bytes")
        if self._owns_browser and self._browser is not None and not self._browser.is_connected():
            await self.close()  # Chromium died (killed, crashed): start a fresh one
        await self.start()
        try:
            context = await self._browser.new_context(
                viewport={"width": cfg.width_px, "height": cfg.height_px},
                device_scale_factor=1, java_script_enabled=False,
            )
        except Exception as exc:  # Playwright's Error: the browser is gone
            raise RenderError(f"Chromium failed to open a page: {exc}") from exc
        try:
            context.set_default_timeout(cfg.timeout_s * 1000)
            await context.route(re.compile(r"^(?!data:).*"), lambda route: route.abort())
            page = await context.new_page()
            navigations: list[str] = []
            page.on("framenavigated", lambda frame: navigations.append(frame.url))
            async with asyncio.timeout(cfg.deck_timeout_s):
                # A <meta http-equiv=refresh> would race the render (a 0 s refresh may or may not
                # fire before window.stop()); a still render ignores it, deterministically.
                await page.set_content(_META_REFRESH.sub("", html), wait_until="load")
                await page.evaluate("window.stop()")
                if navigations:
                    raise RuntimeError(f"the deck navigated away to {navigations[-1][:100]}")
                report = await self._render_page(page, png_dir)
        except Exception as exc:  # Playwright's Error, TimeoutError: whose fault depends on the browser
            if not self._browser.is_connected():
                raise RenderError(f"Chromium died while rendering the deck: {exc}") from exc
            # The browser is fine, so the deck broke the page (navigated away, too slow to paint).
            report = RenderReport(width_px=cfg.width_px, height_px=cfg.height_px, n_slides=0,
                                  error=f"the deck could not be rendered: {type(exc).__name__}: {exc}"[:500])
        finally:
            with contextlib.suppress(Exception):  # a dead browser cannot close its context
                await context.close()
        report.render_s = time.monotonic() - t0
        return report

    async def _render_page(self, page: Any, png_dir: Path | None) -> RenderReport:
        cfg = self.config
        first = await page.evaluate(self._measure_js, 0)
        n_slides = int(first["n_slides"])
        report = RenderReport(width_px=cfg.width_px, height_px=cfg.height_px, n_slides=n_slides)
        if png_dir is not None:
            png_dir.mkdir(parents=True, exist_ok=True)
        # CDP's screenshot is about twice as fast as page.screenshot (no waits, no style injection).
        cdp = await page.context.new_cdp_session(page)
        for index in range(min(n_slides, cfg.max_slides)):
            measured = first if index == 0 else await page.evaluate(self._measure_js, index)
            shot = await _screenshot(cdp)
            await page.evaluate(self._inkless_js, index)
            bare = await _screenshot(cdp)
            png_path = None
            if png_dir is not None:
                png_path = png_dir / f"slide-{index + 1:02d}.png"
            # Decoding and diffing take tens of ms per slide: off the event loop.
            report.slides.append(await asyncio.to_thread(self._slide, index, measured, shot, bare, png_path))
        return report

    def _slide(self, index: int, m: dict[str, Any], shot: bytes, bare: bytes,
               png_path: Path | None) -> SlideRender:
        if png_path is not None:
            png_path.write_bytes(shot)
        full, empty = _decode(shot), _decode(bare)
        ink = (np.abs(full - empty).max(axis=2) >= self.config.min_ink_delta).astype(np.int32)
        ink_sum = np.pad(ink.cumsum(0).cumsum(1), ((1, 0), (1, 0)))
        frame: Rect = (0.0, 0.0, float(self.config.width_px), float(self.config.height_px))
        texts = [self._text(t, frame, ink_sum, empty) for t in m["texts"]]
        return SlideRender(
            index=index, png_path=str(png_path) if png_path else None,
            has_title_element=bool(m["title_found"]), texts=texts,
            boxes=[ElementBox(tag=b["tag"], box=tuple(b["box"])) for b in m["boxes"]],
            scroll_w=int(m["scroll_w"]), scroll_h=int(m["scroll_h"]),
            ink_ratio=float(ink.mean()),
        )

    def _text(self, t: dict[str, Any], frame: Rect, ink_sum: np.ndarray, empty: np.ndarray) -> TextItem:
        rects: list[Rect] = [tuple(r) for r in t["rects"]]
        clip: Rect = tuple(t["clip"])
        area = sum(w * h for _, _, w, h in rects)
        in_frame = sum(_area(_inter(r, frame)) for r in rects)
        shown_rects = [_inter(_inter(r, clip), frame) for r in rects]
        shown = sum(_area(r) for r in shown_rects)
        ink_px = sum(_box_sum(ink_sum, r) for r in shown_rects)
        font_px = float(t["font_px"])
        heights = [h for _, _, _, h in rects if h > 0]
        eff_font = min(font_px, statistics.median(heights) / LINE_BOX_EM) if heights else 0.0
        chunks = [c for r in shown_rects for c in _chunks(r, 2 * max(eff_font, 8.0))]
        inkless = sum(_box_sum(ink_sum, c) < self.config.min_ink_density * _area(c) for c in chunks)
        n_chars = max(len(t["text"]), 1)
        width = sum(w for _, _, w, _ in rects)
        fields = dict(
            text=t["text"], tag=t["tag"], in_title=bool(t["in_title"]), rects=rects,
            font_px=font_px, effective_font_px=eff_font, color=t["color"],
            visibility=t["visibility"], opacity=float(t["opacity"]),
            letter_spacing_px=float(t["letter_spacing_px"]), word_spacing_px=float(t["word_spacing_px"]),
            line_pitch_px=_line_pitch(rects),
            char_width_ratio=width / n_chars / eff_font if eff_font > 0 else 0.0,
            shown_fraction=shown / area if area > 0 else 0.0,
            ink_px=int(ink_px), ink_density=ink_px / shown if shown > 0 else 0.0,
            inkless_fraction=inkless / len(chunks) if chunks else 1.0,
            contrast=_contrast(t["color"], t["opacity"], empty, shown_rects),
        )
        fields["hidden_reason"] = self._hidden_reason(fields, area, in_frame)
        return TextItem(**fields)

    def _hidden_reason(self, f: dict[str, Any], area: float, in_frame: float) -> str | None:
        cfg = self.config
        if not f["rects"]:
            return "not rendered (display:none, or inside a hidden element)"
        if f["visibility"] != "visible":
            return "visibility:hidden"
        if area < 1.0 or f["effective_font_px"] < 1.0:
            return "zero size"
        if f["opacity"] <= 0.05:
            return "transparent (opacity)"
        if f["shown_fraction"] < cfg.min_shown_fraction:
            if in_frame < area * cfg.min_shown_fraction:
                return "off-frame" if in_frame <= 0 else "cut off by the frame edge"
            return "clipped by overflow" if f["shown_fraction"] <= 0 else "cut off by overflow clipping"
        if f["ink_density"] < cfg.min_ink_density:
            return "paints no ink (transparent, background colour, or covered)"
        if f["inkless_fraction"] > cfg.max_inkless_fraction:
            return f"{f['inkless_fraction']:.0%} of it paints no ink (partly covered or faded)"
        return None


async def _screenshot(cdp: Any) -> bytes:
    """The viewport as PNG bytes."""
    shot = await cdp.send("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True})
    return base64.b64decode(shot["data"])


def _decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def _inter(a: Rect, b: Rect) -> Rect:
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[0] + a[2], b[0] + b[2]), min(a[1] + a[3], b[1] + b[3])
    return (x0, y0, max(0.0, x1 - x0), max(0.0, y1 - y0))


def _area(r: Rect) -> float:
    return r[2] * r[3]


def _box_sum(ink_sum: np.ndarray, r: Rect) -> int:
    """Ink pixels inside ``r`` from the summed-area table ``ink_sum`` (shape (H+1, W+1))."""
    h, w = ink_sum.shape[0] - 1, ink_sum.shape[1] - 1
    x0, y0 = min(max(int(round(r[0])), 0), w), min(max(int(round(r[1])), 0), h)
    x1, y1 = min(max(int(round(r[0] + r[2])), 0), w), min(max(int(round(r[1] + r[3])), 0), h)
    if x1 <= x0 or y1 <= y0:
        return 0
    return int(ink_sum[y1, x1] - ink_sum[y0, x1] - ink_sum[y1, x0] + ink_sum[y0, x0])


def _chunks(r: Rect, width_px: float) -> list[Rect]:
    """``r`` cut into equal stretches about ``width_px`` wide (at least one if it has area)."""
    if r[2] < 1 or r[3] < 1:
        return []
    n = max(1, round(r[2] / width_px))
    w = r[2] / n
    return [(r[0] + i * w, r[1], w, r[3]) for i in range(n)]


def _line_pitch(rects: list[Rect]) -> float | None:
    tops = sorted({round(y) for _, y, w, h in rects if w > 0 and h > 0})
    lines = [y for i, y in enumerate(tops) if i == 0 or y - tops[i - 1] > 2]
    if len(lines) < 2:
        return None
    return float(statistics.median(b - a for a, b in zip(lines, lines[1:])))


def _rgba(css: str) -> tuple[float, float, float, float]:
    nums = [float(x) for x in re.findall(r"[\d.]+", css)]
    if len(nums) < 3:
        return (0.0, 0.0, 0.0, 1.0)
    return (nums[0], nums[1], nums[2], nums[3] if len(nums) > 3 else 1.0)


def _luminance(rgb: np.ndarray) -> float:
    """WCAG 2.x relative luminance of an sRGB colour with channels 0-255."""
    c = rgb / 255.0
    c = np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2])


def _contrast(color: str, opacity: float, empty: np.ndarray, rects: list[Rect]) -> float:
    """WCAG contrast ratio ``(L1 + 0.05) / (L2 + 0.05)`` of the text colour, composited with its
    alpha and opacity, over the median background pixel behind the text."""
    pixels = [empty[int(y):int(y + h), int(x):int(x + w)].reshape(-1, 3)
              for x, y, w, h in rects if w >= 1 and h >= 1]
    if not pixels:
        return 1.0
    bg = np.median(np.concatenate(pixels), axis=0)
    r, g, b, a = _rgba(color)
    alpha = a * opacity
    fg = alpha * np.array([r, g, b]) + (1 - alpha) * bg
    hi, lo = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)
