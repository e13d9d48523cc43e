"""The render report as text: what the agent reads after a ``render`` action, and people after a run."""

from __future__ import annotations

from gymfleet.envs.slides.checks import CheckConfig, Scorecard, legible
from gymfleet.envs.slides.records import RenderReport, SlideRender

MAX_TEXTS_PER_SLIDE = 12


def render_text(report: RenderReport, card: Scorecard, cfg: CheckConfig | None = None) -> str:
    """A compact, line-oriented report: the checks, then what each slide shows and hides.

    Args:
        report: the render of the deck.
        card: its scorecard (``score_deck(report, brief)``).
        cfg: the thresholds used (for the legibility marks).
    """
    cfg = cfg or CheckConfig()
    lines = [f"Render: {report.n_slides} slide(s) at {report.width_px}x{report.height_px}, "
             f"score {card.reward:.2f}"]
    if report.error:
        lines.append(f"ERROR: {report.error}")
    for c in card.checks:
        mark = "PASS" if c.score >= 1 else f"{c.score:.2f}"
        lines.append(f"  [{mark}] {c.name} (weight {c.weight:g}): {c.detail}")
    for s in report.slides:
        lines.extend(_slide_lines(s, cfg))
    return "\n".join(lines)


def _slide_lines(s: SlideRender, cfg: CheckConfig) -> list[str]:
    title = " ".join(t.text for t in s.texts if t.in_title) or "(no h1/h2 title)"
    out = [f"Slide {s.index + 1}: {title[:80]!r}  ink {s.ink_ratio:.1%}"]
    for t in s.texts[:MAX_TEXTS_PER_SLIDE]:
        x, y = (t.rects[0][0], t.rects[0][1]) if t.rects else (0.0, 0.0)
        if not t.visible:
            state = f"HIDDEN: {t.hidden_reason}"
        elif not legible(t, cfg):
            state = f"ILLEGIBLE: {t.effective_font_px:.0f}px, contrast {t.contrast:.1f}"
        else:
            state = f"{t.effective_font_px:.0f}px"
        out.append(f"  <{t.tag}> at ({x:.0f},{y:.0f}) {state}: {t.text[:70]!r}")
    if len(s.texts) > MAX_TEXTS_PER_SLIDE:
        out.append(f"  ... {len(s.texts) - MAX_TEXTS_PER_SLIDE} more text(s)")
    return out
