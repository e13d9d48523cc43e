"""The render report: what Chromium showed of each slide, as typed records (no scoring here)."""

from __future__ import annotations

from pydantic import BaseModel, Field

Rect = tuple[float, float, float, float]
"""``(x, y, width, height)`` in CSS pixels of the 1280x720 frame; the origin is the top left."""


class TextItem(BaseModel):
    """One text node of a slide (whitespace collapsed) and how it was painted.

    A text node is visible when it has a box, is not ``visibility: hidden`` or transparent,
    lies wholly inside the frame and inside every clipping ancestor, and paints ink: the
    screenshot differs from a second one with all glyphs made transparent in at least
    ``min_ink_density`` of its box (so text the colour of its background, or covered by
    another element, paints none).
    """

    text: str
    tag: str
    """Tag of the element holding the text node."""
    in_title: bool
    """Inside the slide's title (its first ``h1`` or ``h2``)."""
    rects: list[Rect]
    """One rectangle per line fragment (``Range.getClientRects``)."""
    font_px: float
    """Computed ``font-size``, CSS px."""
    effective_font_px: float
    """Font size as painted: ``min(font_px, median line-box height / 1.1)``; transforms that
    shrink text shrink this."""
    color: str
    visibility: str
    opacity: float
    """Product of the opacities of the element and its ancestors."""
    letter_spacing_px: float
    word_spacing_px: float
    line_pitch_px: float | None
    """Median distance between the tops of successive lines; None for one line."""
    char_width_ratio: float
    """Mean advance per character divided by the effective font size (about 0.5 for text set
    normally; letter- or word-spacing inflates it, squashing shrinks it)."""
    shown_fraction: float
    """Share of the text's box inside the frame and inside every clipping ancestor."""
    ink_px: int
    """Pixels inside the shown box that change when the glyphs are made transparent."""
    ink_density: float
    """``ink_px`` over the shown box area."""
    inkless_fraction: float = 0.0
    """Share of the shown box's stretches (two font sizes wide) that paint no ink."""
    contrast: float
    """WCAG contrast ratio of the text colour against the median background behind it."""
    hidden_reason: str | None
    """Why the text is not visible (None when it is)."""

    @property
    def visible(self) -> bool:
        return self.hidden_reason is None

    @property
    def area_px(self) -> float:
        return sum(w * h for _, _, w, h in self.rects)


class ElementBox(BaseModel):
    """A painted element's border box, cut by its clipping ancestors."""

    tag: str
    box: Rect


class SlideRender(BaseModel):
    """One slide rendered alone in the frame."""

    index: int
    """0-based position in the deck."""
    png_path: str | None = None
    """Where the screenshot was saved (None when not saved)."""
    has_title_element: bool
    """The slide contains an ``h1`` or ``h2``."""
    texts: list[TextItem] = Field(default_factory=list)
    boxes: list[ElementBox] = Field(default_factory=list)
    scroll_w: int
    """``document.documentElement.scrollWidth`` with only this slide shown."""
    scroll_h: int
    ink_ratio: float
    """Pixels changed by making all glyphs transparent, over the frame area."""

    @property
    def visible_texts(self) -> list[TextItem]:
        return [t for t in self.texts if t.visible]


class RenderReport(BaseModel):
    """A whole deck as rendered: the input of every check in ``checks.py``."""

    width_px: int
    height_px: int
    n_slides: int
    """Number of ``<section class="slide">`` elements in the document."""
    slides: list[SlideRender] = Field(default_factory=list)
    error: str | None = None
    """Set when the deck could not be rendered at all (missing file, not HTML, too large)."""
    render_s: float = 0.0
