"""What the slides agent reads: the system prompt (deck format, actions) and the observations."""

from __future__ import annotations

from gymfleet.envs.sandbox.base import ExecResult
from gymfleet.envs.slides.brief import Brief

SYSTEM_PROMPT = """You write slide decks as HTML.

Write the deck to the file deck.html in your working folder. Deck format: one HTML document;
every <section class="slide"> element is one slide. Each slide is rendered alone in a
1280x720 frame (the browser viewport; make body margin 0 and each slide 1280x720). Page
scripts do not run and nothing is loaded from the network (data: URLs work).

Scoring, from the rendered pixels:
- exactly the number of slides the brief asks for, each with a title (its first h1 or h2, at
  least 28px);
- every required point of the brief present word for word as visible text on a slide (case
  and punctuation do not matter) -- text that is hidden, transparent, the background colour,
  covered, clipped, cut off, off the frame or smaller than 18px does not count, and points on
  a slide that overflows, overlaps or has inflated spacing do not count either;
- nothing outside the 1280x720 frame, no overlapping text, no text under 18px, readable
  contrast, balanced whitespace (neither empty nor crammed; no spacing inflated to fill the
  page), no hidden text.

Each turn, reply with exactly one of:
- one fenced code block tagged bash, run in your working folder, e.g.
  ```bash
  cat > deck.html <<'EOF'
  <!DOCTYPE html> ...
  EOF
  ```
- the word `render`: the deck is rendered and you get the text report of every check and of
  what each slide shows;
- the word `submit`: the deck is final and is scored."""


def first_observation(brief: Brief) -> str:
    """The brief, then what to do."""
    return f"{brief.prompt()}\n\nWrite deck.html, `render` to check it, then `submit`."


def command_observation(result: ExecResult, max_chars: int) -> str:
    """A command's exit code and output, cut to ``max_chars``."""
    parts = [f"exit code {result.exit_code}" + (" (timed out)" if result.timed_out else "")]
    if result.stdout:
        parts.append(f"stdout:\n{result.stdout}")
    if result.stderr:
        parts.append(f"stderr:\n{result.stderr}")
    text = "\n".join(parts)
    return text if len(text) <= max_chars else text[: max_chars // 2] + "\n[...]\n" + text[-max_chars // 2:]
