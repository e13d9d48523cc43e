"""The checks that score a rendered deck: each a small pure function of the render report.

The reward is the weighted share of checks passed (:data:`WEIGHTS`, the one place weights
live); each check scores in [0, 1], most as the share of slides that pass it. Three rules keep
the cheap exploits unprofitable:

* Text counts only when it is *visible* (see ``TextItem``) and *legible* (painted font size at
  least ``min_font_px``, contrast at least ``min_contrast``); required points are matched on
  that text only.
* Points count only on *sound* slides: no text cut off or outside the frame, no overlapping
  text, no inflated spacing. Content on a broken slide is not presented.
* Layout checks pass only on slides that show legible text: the layout of nothing earns nothing.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable

from pydantic import BaseModel, Field

from gymfleet.core.strict import StrictModel
from gymfleet.envs.slides.brief import Brief, normalize
from gymfleet.envs.slides.records import Rect, RenderReport, SlideRender, TextItem

WEIGHTS: dict[str, float] = {
    "slide_count": 0.05,
    "titles": 0.10,
    "required_points": 0.50,
    "fits_frame": 0.10,
    "no_overlap": 0.05,
    "legible_text": 0.05,
    "balanced_whitespace": 0.10,
    "no_hidden_text": 0.05,
}
"""Check name -> weight. Points dominate so that a deck that hides, shrinks, cuts or spreads
its content scores below 0.5 however tidy its layout."""


MAX_DETAIL_CHARS = 1200
"""A check's detail is cut here (it goes into every render report the agent reads)."""


class CheckConfig(StrictModel):
    """Thresholds of the checks (CSS px of the 1280x720 frame)."""

    min_font_px: float = 18.0
    """Smallest painted font size that counts as legible."""
    min_title_font_px: float = 28.0
    """Smallest painted font size of a slide title."""
    min_contrast: float = 3.0
    """Smallest WCAG contrast ratio of legible text (AA for large text)."""
    max_letter_spacing_em: float = 0.15
    max_word_spacing_em: float = 0.6
    max_line_pitch_em: float = 2.0
    """Largest distance between successive lines of one text, in font sizes."""
    max_char_width_em: float = 0.9
    """Largest mean advance per character (texts of 8+ characters), in font sizes."""
    max_block_gap_em: float = 2.0
    """Largest median empty height between a body text and the next one below it in the same
    column, in font sizes (the gap under the title is left out: a free design choice);
    margins, padding or flex gaps inflated to fill the page raise it."""
    min_text_area: float = 0.04
    """Smallest share of the frame covered by line boxes of visible text (an empty slide)."""
    max_text_area: float = 0.6
    """Largest share (a crammed slide)."""
    min_span_w: float = 0.35
    """Smallest width of the text block, as a share of the frame width."""
    overlap_fraction: float = 0.2
    """Two texts overlap when their boxes share this much of the smaller box (and 20 px²)."""
    overflow_tolerance_px: float = 2.0
    weights: dict[str, float] = Field(default_factory=lambda: dict(WEIGHTS))


class CheckResult(BaseModel):
    """One check's outcome."""

    name: str
    score: float
    """In [0, 1]."""
    weight: float
    detail: str
    """What failed, for people and for the agent's render report."""


class Scorecard(BaseModel):
    """Every check and the reward: ``sum(weight * score) / sum(weight)``."""

    reward: float
    checks: list[CheckResult]

    def by_name(self) -> dict[str, CheckResult]:
        return {c.name: c for c in self.checks}


def legible(t: TextItem, cfg: CheckConfig) -> bool:
    return t.visible and t.effective_font_px >= cfg.min_font_px and t.contrast >= cfg.min_contrast


def has_content(s: SlideRender, cfg: CheckConfig) -> bool:
    return any(legible(t, cfg) for t in s.texts)


def cut_text_problems(s: SlideRender) -> list[str]:
    """Texts on slide ``s`` cut off or pushed out by the frame edge or a clipping ancestor."""
    return [f"text {t.text[:40]!r} {t.hidden_reason}" for t in s.texts
            if t.rects and t.shown_fraction < 0.98 and t.area_px >= 1 and t.visibility == "visible"]


def frame_problems(s: SlideRender, w: int, h: int, cfg: CheckConfig) -> list[str]:
    """What sticks out of the frame or is cut off on slide ``s`` (texts and element boxes)."""
    tol = cfg.overflow_tolerance_px
    out = cut_text_problems(s)
    for b in s.boxes:
        x, y, bw, bh = b.box
        if x < -tol or y < -tol or x + bw > w + tol or y + bh > h + tol:
            out.append(f"<{b.tag}> at ({x:.0f},{y:.0f}) size {bw:.0f}x{bh:.0f} leaves the {w}x{h} frame")
    if s.scroll_w > w + tol or s.scroll_h > h + tol:
        out.append(f"page scrolls to {s.scroll_w}x{s.scroll_h}, beyond the {w}x{h} frame")
    return out


def _overlap(a: Rect, b: Rect) -> float:
    w = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
    h = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
    return max(0.0, w) * max(0.0, h)


def overlap_problems(s: SlideRender, cfg: CheckConfig) -> list[str]:
    """Pairs of visible texts whose boxes overlap."""
    texts = s.visible_texts
    out = []
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            for ra in a.rects:
                hit = [rb for rb in b.rects if _overlap(ra, rb) >= max(
                    20.0, cfg.overlap_fraction * min(ra[2] * ra[3], rb[2] * rb[3]))]
                if hit:
                    out.append(f"{a.text[:30]!r} overlaps {b.text[:30]!r}")
                    break
    return out


def _union(t: TextItem) -> Rect:
    x0, y0 = min(r[0] for r in t.rects), min(r[1] for r in t.rects)
    x1, y1 = max(r[0] + r[2] for r in t.rects), max(r[1] + r[3] for r in t.rects)
    return (x0, y0, x1 - x0, y1 - y0)


def block_gaps_em(texts: list[TextItem]) -> list[float]:
    """For each text, the empty height down to the next text below it in the same column
    (boxes overlapping horizontally), in font sizes of the larger of the two."""
    boxes = [(_union(t), max(t.effective_font_px, 1.0)) for t in texts if t.rects]
    gaps = []
    for (a, fa) in boxes:
        below = [(b[1] - (a[1] + a[3]), fb) for b, fb in boxes
                 if b[1] >= a[1] + a[3] - 2 and min(a[0] + a[2], b[0] + b[2]) > max(a[0], b[0])]
        if below:
            gap, fb = min(below)
            gaps.append(max(gap, 0.0) / max(fa, fb))
    return gaps


def _without_footers(texts: list[TextItem]) -> list[TextItem]:
    """``texts`` less footers: texts at the bottom of their column (nothing below them) set
    smaller than 0.8 of the median font (a source line or page number far below the body)."""
    if len(texts) < 3:
        return texts
    median_px = statistics.median(t.effective_font_px for t in texts)
    boxes = [_union(t) for t in texts]

    def footer(i: int) -> bool:
        a = boxes[i]
        below = any(b[1] >= a[1] + a[3] - 2 and min(a[0] + a[2], b[0] + b[2]) > max(a[0], b[0])
                    for j, b in enumerate(boxes) if j != i)
        return not below and texts[i].effective_font_px < 0.8 * median_px

    return [t for i, t in enumerate(texts) if t.rects and not footer(i)]


def spacing_problems(s: SlideRender, cfg: CheckConfig) -> list[str]:
    """Spacing inflated to fill the page: letters, words, lines, or gaps between blocks."""
    out = []
    for t in s.visible_texts:
        em = max(t.effective_font_px, 1.0)
        if t.letter_spacing_px > cfg.max_letter_spacing_em * em:
            out.append(f"letter-spacing {t.letter_spacing_px:.0f}px on {t.text[:30]!r}")
        if t.word_spacing_px > cfg.max_word_spacing_em * em:
            out.append(f"word-spacing {t.word_spacing_px:.0f}px on {t.text[:30]!r}")
        if t.line_pitch_px is not None and t.line_pitch_px > cfg.max_line_pitch_em * em:
            out.append(f"lines {t.line_pitch_px:.0f}px apart for {em:.0f}px text on {t.text[:30]!r}")
        if len(t.text) >= 8 and t.char_width_ratio > cfg.max_char_width_em:
            out.append(f"characters stretched ({t.char_width_ratio:.2f} em each) on {t.text[:30]!r}")
    gaps = block_gaps_em(_without_footers([t for t in s.visible_texts if not t.in_title]))
    if gaps and statistics.median(gaps) > cfg.max_block_gap_em:
        out.append(f"texts are {statistics.median(gaps):.1f} font sizes apart (median; at most "
                   f"{cfg.max_block_gap_em:g}): margins or gaps inflated")
    return out


def balance_problems(s: SlideRender, w: int, h: int, cfg: CheckConfig) -> list[str]:
    """Too empty, too crammed, squeezed into a narrow strip, or spacing inflated."""
    texts = s.visible_texts
    area = sum(t.area_px for t in texts) / (w * h)
    out = []
    if area < cfg.min_text_area:
        out.append(f"text covers {area:.1%} of the slide (too empty; at least {cfg.min_text_area:.0%})")
    if area > cfg.max_text_area:
        out.append(f"text covers {area:.0%} of the slide (crammed; at most {cfg.max_text_area:.0%})")
    xs = [(x, x + rw) for t in texts for x, _, rw, _ in t.rects]
    if xs and (max(b for _, b in xs) - min(a for a, _ in xs)) < cfg.min_span_w * w:
        out.append(f"text block narrower than {cfg.min_span_w:.0%} of the frame")
    return out + spacing_problems(s, cfg)


def sound(s: SlideRender, cfg: CheckConfig) -> bool:
    """A slide whose content counts: no text cut off or out of the frame, no overlapping text,
    spacing not inflated. (A box that merely pokes out of the frame fails ``fits_frame`` only.)"""
    return not (cut_text_problems(s) or overlap_problems(s, cfg) or spacing_problems(s, cfg))


CheckFn = Callable[[RenderReport, Brief, CheckConfig], tuple[float, str]]


def _per_slide(report: RenderReport, problems: Callable[[SlideRender], list[str]],
               cfg: CheckConfig) -> tuple[float, str]:
    """Share of slides with legible content and no problems; the detail names the others."""
    if not report.slides:
        return 0.0, "no slides rendered"
    bad = []
    for s in report.slides:
        found = problems(s) if has_content(s, cfg) else ["no legible text on the slide"]
        if found:
            bad.append(f"slide {s.index + 1}: " + "; ".join(found[:3]))
    detail = "; ".join(bad) or "ok"
    return 1 - len(bad) / len(report.slides), detail if len(detail) <= MAX_DETAIL_CHARS else (
        detail[:MAX_DETAIL_CHARS] + f" [... {len(bad)} slides in all]")


def check_slide_count(report: RenderReport, brief: Brief, cfg: CheckConfig) -> tuple[float, str]:
    ok = report.n_slides == brief.n_slides
    return float(ok), "ok" if ok else f"{report.n_slides} slides, the brief asks for {brief.n_slides}"


def check_titles(report: RenderReport, brief: Brief, cfg: CheckConfig) -> tuple[float, str]:
    def problems(s: SlideRender) -> list[str]:
        title = [t for t in s.texts if t.in_title]
        if not s.has_title_element or not title:
            return ["no h1/h2 title"]
        if not all(legible(t, cfg) for t in title):
            return ["title not visible and legible"]
        if min(t.effective_font_px for t in title) < cfg.min_title_font_px:
            return [f"title smaller than {cfg.min_title_font_px:.0f}px"]
        return []

    return _per_slide(report, problems, cfg)


def visible_points(report: RenderReport, brief: Brief,
                   cfg: CheckConfig | None = None) -> dict[str, int | None]:
    """Each required point -> the 1-based slide showing it legibly on a sound slide, or None."""
    cfg = cfg or CheckConfig()
    found: dict[str, int | None] = {p: None for p in brief.points}
    for s in report.slides:
        if not sound(s, cfg):
            continue
        words = f" {normalize(' '.join(t.text for t in s.texts if legible(t, cfg)))} "
        for p in brief.points:
            if found[p] is None and f" {normalize(p)} " in words:
                found[p] = s.index + 1
    return found


def check_required_points(report: RenderReport, brief: Brief, cfg: CheckConfig) -> tuple[float, str]:
    found = visible_points(report, brief, cfg)
    missing = [p for p, where in found.items() if where is None]
    detail = "ok" if not missing else "not shown legibly on a sound slide: " + "; ".join(
        repr(p) for p in missing)
    return 1 - len(missing) / len(found), detail


def check_fits_frame(report: RenderReport, brief: Brief, cfg: CheckConfig) -> tuple[float, str]:
    w, h = report.width_px, report.height_px
    return _per_slide(report, lambda s: frame_problems(s, w, h, cfg), cfg)


def check_no_overlap(report: RenderReport, brief: Brief, cfg: CheckConfig) -> tuple[float, str]:
    return _per_slide(report, lambda s: overlap_problems(s, cfg), cfg)


def check_legible_text(report: RenderReport, brief: Brief, cfg: CheckConfig) -> tuple[float, str]:
    def problems(s: SlideRender) -> list[str]:
        return [f"{t.text[:30]!r} at {t.effective_font_px:.0f}px, contrast {t.contrast:.1f}"
                for t in s.visible_texts if not legible(t, cfg)]

    return _per_slide(report, problems, cfg)


def check_balanced_whitespace(report: RenderReport, brief: Brief, cfg: CheckConfig) -> tuple[float, str]:
    w, h = report.width_px, report.height_px
    return _per_slide(report, lambda s: balance_problems(s, w, h, cfg), cfg)


def check_no_hidden_text(report: RenderReport, brief: Brief, cfg: CheckConfig) -> tuple[float, str]:
    def problems(s: SlideRender) -> list[str]:
        return [f"{t.text[:30]!r}: {t.hidden_reason}" for t in s.texts if not t.visible]

    return _per_slide(report, problems, cfg)


CHECKS: dict[str, CheckFn] = {
    "slide_count": check_slide_count,
    "titles": check_titles,
    "required_points": check_required_points,
    "fits_frame": check_fits_frame,
    "no_overlap": check_no_overlap,
    "legible_text": check_legible_text,
    "balanced_whitespace": check_balanced_whitespace,
    "no_hidden_text": check_no_hidden_text,
}


def score_deck(report: RenderReport, brief: Brief, cfg: CheckConfig | None = None) -> Scorecard:
    """Runs every check on ``report``; a deck that did not render scores 0 on all of them."""
    cfg = cfg or CheckConfig()
    results = []
    for name, fn in CHECKS.items():
        score, detail = (0.0, report.error) if report.error else fn(report, brief, cfg)
        results.append(CheckResult(name=name, score=score, weight=cfg.weights[name], detail=detail))
    total = sum(r.weight for r in results)
    reward = sum(r.weight * r.score for r in results) / total if total else 0.0
    return Scorecard(reward=round(reward, 6), checks=results)
