"""The browser env's action language: parsing one call per turn and running it with Playwright.

Grammar (one call, Python call syntax, literal arguments only)::

    click(12)               left-click element 12
    fill(7, "text")         replace the text of field 7
    select(3, "option")     choose an option of select 3 (by its label, else its value)
    press("Enter")          press a key on the focused element (Playwright key names)
    press(7, "Enter")       focus element 7, then press the key
    scroll(0, 200)          scroll by (dx, dy) pixels where the mouse is
    scroll(4, 0, 200)       scroll element 4 by (dx, dy) pixels
    hover(5)                move the mouse over element 5
    noop()                  do nothing this turn

The text is parsed with :mod:`ast` (never evaluated); a code fence around it is allowed.
Bad text raises :class:`ActionParseError`, a bad target :class:`ActionError`; the env turns
both into an observation that says what was wrong.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from gymfleet.envs.browser.errors import ActionError, ActionParseError
from gymfleet.envs.browser.page_text import ID_ATTRIBUTE

GRAMMAR = (
    'click(id) | fill(id, "text") | select(id, "option") | press("Key") | press(id, "Key") | '
    "scroll(dx, dy) | scroll(id, dx, dy) | hover(id) | noop()"
)

# name -> accepted argument type tuples (int = element id or pixels, str = text).
SIGNATURES: dict[str, tuple[tuple[type, ...], ...]] = {
    "click": ((int,),),
    "fill": ((int, str),),
    "select": ((int, str),),
    "press": ((str,), (int, str)),
    "scroll": ((int, int), (int, int, int)),
    "hover": ((int,),),
    "noop": ((),),
}

_ARG_NAMES = {int: "id", str: '"text"'}
_FORMS = {"scroll": "scroll(dx, dy) or scroll(id, dx, dy)", "noop": "noop()"}
_FENCE = re.compile(r"^```[a-zA-Z]*\n?(.*?)\n?```$", re.DOTALL)


@dataclass(frozen=True)
class BrowserAction:
    """One parsed action.

    Attributes:
        name: ``click``, ``fill``, ``select``, ``press``, ``scroll``, ``hover`` or ``noop``.
        element_id: the target's id, or None (``press(key)``, ``scroll(dx, dy)``, ``noop``).
        text: the text to fill, the option to select, or the key to press.
        dx: horizontal scroll, pixels.
        dy: vertical scroll, pixels.
    """

    name: str
    element_id: int | None = None
    text: str = ""
    dx: int = 0
    dy: int = 0

    def __str__(self) -> str:
        args: list[Any] = [] if self.element_id is None else [self.element_id]
        if self.name == "scroll":
            args += [self.dx, self.dy]
        elif self.name in {"fill", "select", "press"}:
            args.append(self.text)
        return f"{self.name}({', '.join(repr(a) if isinstance(a, str) else str(a) for a in args)})"


def parse_action(text: str) -> BrowserAction:
    """Parses one action.

    Raises:
        ActionParseError: not exactly one known call with literal arguments of the right types;
            the message quotes the grammar.
    """
    source = text.strip()
    fenced = _FENCE.match(source)
    if fenced:
        source = fenced.group(1).strip()
    if not source:
        raise ActionParseError(f"empty action. Write exactly one of: {GRAMMAR}")
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        raise ActionParseError(
            f"could not parse {_clip(source)!r} as a call. Write exactly one of: {GRAMMAR}"
        ) from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.keywords:
        raise ActionParseError(
            f"{_clip(source)!r} is not a single call without keywords. Write one of: {GRAMMAR}"
        )
    name = node.func.id
    if name not in SIGNATURES:
        raise ActionParseError(f"unknown action {name!r}. Write exactly one of: {GRAMMAR}")
    try:
        args = [ast.literal_eval(a) for a in node.args]
    except ValueError:
        raise ActionParseError(
            f"the arguments of {name} must be literal numbers or quoted strings, "
            f"e.g. fill(7, \"hello\"); got {_clip(source)!r}"
        ) from None
    return _build(name, [_coerce(a) for a in args], source)


def _coerce(arg: Any) -> Any:
    """Accepts an id written as [12] or 12.0 as the number 12 (models often decorate them)."""
    if isinstance(arg, list) and len(arg) == 1 and isinstance(arg[0], int):
        return arg[0]
    if isinstance(arg, float) and arg.is_integer():
        return int(arg)
    return arg


def _build(name: str, args: list[Any], source: str) -> BrowserAction:
    for signature in SIGNATURES[name]:
        if len(signature) != len(args):
            continue
        typed = _match(signature, args)
        if typed is None:
            continue
        if name == "scroll":
            eid = typed[0] if len(typed) == 3 else None
            return BrowserAction(name, eid, dx=typed[-2], dy=typed[-1])
        if name == "press":
            return BrowserAction(name, typed[0] if len(typed) == 2 else None, text=typed[-1])
        return BrowserAction(name, typed[0] if typed else None, text=typed[1] if len(typed) > 1 else "")
    forms = _FORMS.get(name) or " or ".join(
        f"{name}({', '.join(_ARG_NAMES[t] for t in s)})" for s in SIGNATURES[name]
    )
    raise ActionParseError(f"wrong arguments in {_clip(source)!r}: expected {forms}")


def _match(signature: tuple[type, ...], args: list[Any]) -> list[Any] | None:
    out = []
    for want, arg in zip(signature, args, strict=True):
        if want is int and isinstance(arg, str) and re.fullmatch(r"\[?\d+\]?", arg.strip()):
            arg = int(arg.strip().strip("[]"))
        if want is int and (not isinstance(arg, int) or isinstance(arg, bool)):
            return None
        if want is str and not isinstance(arg, str):
            return None
        out.append(arg)
    return out


def _clip(text: str, n: int = 120) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


async def run_action(page: Any, action: BrowserAction, timeout_s: float = 2.0) -> str:
    """Performs ``action`` on a Playwright async ``page``; returns a one-line summary.

    Raises:
        ActionError: the element does not exist, or Playwright could not act on it
            (hidden, covered, not a field, unknown key); the message says which.
    """
    timeout_ms = timeout_s * 1000
    if action.name == "noop":
        return "did nothing"
    target = None
    if action.element_id is not None:
        target = page.locator(f"[{ID_ATTRIBUTE}='{action.element_id}']")
        if await target.count() == 0:
            raise ActionError(
                f"no element with id {action.element_id} on the page: use an id in brackets "
                "from the latest observation (the page may have changed)"
            )
    try:
        await _dispatch(page, target, action, timeout_ms)
    except Exception as exc:  # Playwright's errors carry a long call log; keep the first line
        if type(exc).__name__ not in {"Error", "TimeoutError"}:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ActionError(f"{action} failed: {first}") from exc
    return f"{action} done"


# Finds a point of the element that is on top (elementFromPoint hits it or a child): the centre
# first, then a 5x5 grid over its box. Returns [x, y] relative to the element's top-left corner,
# or null when the centre is on top or no point is (Playwright then clicks, or reports, as usual).
_VISIBLE_POINT_JS = """el => {
  const box = el.getBoundingClientRect();
  const onTop = (x, y) => { const hit = document.elementFromPoint(box.left + x, box.top + y);
                            return hit !== null && (hit === el || el.contains(hit)); };
  if (box.width === 0 || box.height === 0 || onTop(box.width / 2, box.height / 2)) return null;
  for (const fy of [0.5, 0.1, 0.9, 0.3, 0.7]) for (const fx of [0.5, 0.1, 0.9, 0.3, 0.7]) {
    const x = box.width * fx, y = box.height * fy;
    if (onTop(x, y)) return [x, y];
  }
  return null;
}"""


async def _click(target: Any, timeout_ms: float) -> None:
    """Clicks ``target`` where it can be seen: at its centre, or, when another element covers
    the centre (MiniWoB places buttons that overlap), at a visible point of it, as a person
    would. A wholly covered element still fails with Playwright's own error."""
    point = await target.evaluate(_VISIBLE_POINT_JS)
    if point is None:
        await target.click(timeout=timeout_ms)
    else:
        await target.click(position={"x": point[0], "y": point[1]}, timeout=timeout_ms)


async def _dispatch(page: Any, target: Any, action: BrowserAction, timeout_ms: float) -> None:
    if action.name == "click":
        await _click(target, timeout_ms)
    elif action.name == "hover":
        await target.hover(timeout=timeout_ms)
    elif action.name == "fill":
        await target.fill(action.text, timeout=timeout_ms)
    elif action.name == "select":
        await _select(target, action.text, timeout_ms)
    elif action.name == "press":
        if target is None:
            await page.keyboard.press(action.text)
        else:
            await target.press(action.text, timeout=timeout_ms)
    elif action.name == "scroll":
        if target is not None:
            await target.hover(timeout=timeout_ms)
        await page.mouse.wheel(action.dx, action.dy)


async def _select(target: Any, option: str, timeout_ms: float) -> None:
    labels = await target.evaluate(
        "el => el.options ? Array.from(el.options).map(o => [o.label, o.value]) : null"
    )
    if labels is None:
        raise ActionError("select() needs a select element (role combobox or listbox)")
    if any(option == label for label, _ in labels):
        await target.select_option(label=option, timeout=timeout_ms)
    elif any(option == value for _, value in labels):
        await target.select_option(value=option, timeout=timeout_ms)
    else:
        choices = ", ".join(repr(label) for label, _ in labels[:20])
        raise ActionError(f"no option {option!r} in that select; its options are {choices}")
