"""Time to render and score one gold deck, against bare screenshots of the same slides.

Prints JSON: seconds per deck and per slide for the full grader (measure, two screenshots, ink
diff, checks) and for a baseline that only shows each slide and screenshots it once, both on
one warm Chromium; the ratio is the grader's overhead. Run: ``python benchmarks/slides_render.py``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

from gymfleet.envs.slides.brief import gold_deck, load_briefs
from gymfleet.envs.slides.checks import score_deck
from gymfleet.envs.slides.render import DeckRenderer

BRIEF = "solar-microgrids"
REPEATS = 5
SHOW = """(i) => document.querySelectorAll('section.slide').forEach((s, k) =>
  s.style.setProperty('display', k === i ? '' : 'none', 'important'))"""


async def _baseline(renderer: DeckRenderer, html: str, n_slides: int) -> float:
    context = await renderer._browser.new_context(viewport={"width": 1280, "height": 720},
                                                  java_script_enabled=False)
    t0 = time.perf_counter()
    page = await context.new_page()
    await page.set_content(html)
    for i in range(n_slides):
        await page.evaluate(SHOW, i)
        await page.screenshot(type="png")
    elapsed = time.perf_counter() - t0
    await context.close()
    return elapsed


async def main() -> None:
    brief = load_briefs()[BRIEF]
    html = gold_deck(BRIEF)
    t0 = time.perf_counter()
    async with DeckRenderer() as renderer:
        start_s = time.perf_counter() - t0
        full, base = [], []
        for _ in range(REPEATS):
            t = time.perf_counter()
            card = score_deck(await renderer.render(html), brief)
            full.append(time.perf_counter() - t)
            base.append(await _baseline(renderer, html, brief.n_slides))
    grader_s, baseline_s = statistics.median(full), statistics.median(base)
    print(json.dumps({
        "deck": BRIEF, "n_slides": brief.n_slides, "reward": card.reward, "repeats": REPEATS,
        "chromium_start_s": round(start_s, 3),
        "render_and_score_s": round(grader_s, 3),
        "render_and_score_per_slide_s": round(grader_s / brief.n_slides, 3),
        "baseline_screenshots_only_s": round(baseline_s, 3),
        "overhead_ratio": round(grader_s / baseline_s, 2),
    }))


if __name__ == "__main__":
    asyncio.run(main())
