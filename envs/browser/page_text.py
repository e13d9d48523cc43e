"""The text rendering of a page: an accessibility-style tree with a stable id on each element.

One ``page.evaluate`` call walks the DOM, stamps every element it shows with a
``data-gf-id`` attribute (kept for the element's lifetime, so an id means the same element
on every turn of an episode) and returns one record per line. Python formats those records as
text, and :func:`parse_page_text` reads that text back (the gold policies act on it).

A line reads ``[12] button "Submit"`` or ``[7] textbox "Username" value="kenda" focused``:
indentation is nesting, the role comes from ARIA (``role=``) or the tag, the name is the
accessible name (aria-label, label, alt, title, placeholder or the element's own text), both
JSON-quoted. Actions address elements by the number in brackets.

Why not Playwright's ``aria_snapshot(mode="ai")``: its ``[ref=e12]`` ids get a new frame
prefix after every navigation, change when an element's name changes, and cannot be mapped to
DOM elements without one round trip per element; this walk costs one call per observation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

ID_ATTRIBUTE = "data-gf-id"

# Walks the DOM from <body>; returns [{id, depth, role, name, value, states}] in document order.
RENDER_JS = r"""
(opts) => {
  const ATTR = opts.attr, skip = new Set(opts.skip_ids);
  if (window.__gfNextId === undefined) window.__gfNextId = 1;
  const INPUT_ROLES = {checkbox: 'checkbox', radio: 'radio', button: 'button', submit: 'button',
    reset: 'button', image: 'button', range: 'slider', number: 'spinbutton', search: 'searchbox'};
  const TAG_ROLES = {BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox', OPTION: 'option',
    IMG: 'img', H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading',
    H6: 'heading', LABEL: 'label', LI: 'listitem', UL: 'list', OL: 'list', TABLE: 'table',
    TR: 'row', TD: 'cell', TH: 'columnheader', FORM: 'form', P: 'paragraph', SUMMARY: 'button',
    circle: 'circle', rect: 'rect', polygon: 'polygon', ellipse: 'ellipse', line: 'line',
    path: 'path', text: 'text', svg: 'svg'};
  const LEAF = new Set(['button', 'link', 'option', 'heading', 'textbox', 'searchbox', 'img',
    'spinbutton', 'slider', 'tab', 'menuitem']);
  const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const roleOf = (el) => {
    const r = el.getAttribute('role');
    if (r && r !== 'presentation' && r !== 'none') return r;
    if (el.tagName === 'INPUT') return INPUT_ROLES[el.type] || 'textbox';
    if (el.tagName === 'A') return 'link';
    if (el.isContentEditable && el.parentElement && !el.parentElement.isContentEditable) return 'textbox';
    return TAG_ROLES[el.tagName] || null;
  };
  const ownText = (el) => norm(Array.from(el.childNodes)
    .filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.data).join(' '));
  const clickable = (el) => {
    if (el.onclick || el.__onclick || el.hasAttribute('tabindex')) return true;
    const jq = window.jQuery && window.jQuery._data && window.jQuery._data(el, 'events');
    return !!(jq && (jq.click || jq.mousedown || jq.mouseup));
  };
  const nameOf = (el, role) => {
    const aria = el.getAttribute('aria-label');
    if (aria) return norm(aria);
    if (el.labels && el.labels.length) return norm(Array.from(el.labels).map((l) => l.innerText).join(' '));
    if (role === 'textbox' || role === 'searchbox' || role === 'spinbutton' || role === 'combobox')
      return norm(el.getAttribute('placeholder') || el.getAttribute('title'));
    if (el.tagName === 'INPUT') return norm(el.value || el.getAttribute('title'));
    if (el.getAttribute('alt')) return norm(el.getAttribute('alt'));
    if (LEAF.has(role)) return norm(el.innerText !== undefined ? el.innerText : el.textContent)
      || norm(el.getAttribute('title'));
    return ownText(el) || norm(el.getAttribute('title'));
  };
  const visible = (el) => {
    const st = window.getComputedStyle(el);
    if (st.display === 'none' || st.visibility === 'hidden' || st.opacity === '0') return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const out = [];
  const walk = (el, depth) => {
    if (skip.has(el.id) || ['SCRIPT', 'STYLE', 'NOSCRIPT', 'HEAD', 'TEMPLATE'].includes(el.tagName)) return;
    const shown = el.tagName === 'OPTION' || visible(el);
    if (!shown && el.tagName !== 'BODY') {
      const st = window.getComputedStyle(el);
      if (st.display === 'none') return;
    }
    let role = roleOf(el);
    const text = ownText(el);
    if (!role && (text || clickable(el))) role = text ? 'text' : 'generic';
    let childDepth = depth;
    if (shown && role) {
      if (!el.hasAttribute(ATTR)) el.setAttribute(ATTR, String(window.__gfNextId++));
      const states = [];
      if (el === document.activeElement) states.push('focused');
      if (el.checked) states.push('checked');
      if (role === 'option' && el.selected) states.push('selected');
      if (el.disabled) states.push('disabled');
      if (el.readOnly) states.push('readonly');
      let value = null;
      if (['INPUT', 'TEXTAREA'].includes(el.tagName) && !['checkbox', 'radio', 'button', 'submit',
          'reset'].includes(el.type)) value = el.value;
      if (el.tagName === 'SELECT') value = el.selectedIndex >= 0 ? norm(el.options[el.selectedIndex].text) : '';
      if (role === 'textbox' && el.isContentEditable) value = norm(el.innerText);
      out.push({id: +el.getAttribute(ATTR), depth, role, name: nameOf(el, role), value, states});
      childDepth = depth + 1;
      if (LEAF.has(role) && !el.querySelector('input, select, textarea, button, a')) return;
    }
    for (const child of el.children) walk(child, childDepth);
  };
  walk(document.body, 0);
  return out;
}
"""

_LINE = re.compile(r"^(?P<indent> *)\[(?P<id>\d+)\] (?P<role>\S+)(?P<rest>.*)$")


@dataclass(frozen=True)
class PageNode:
    """One element of the rendering.

    Attributes:
        id: the element's ``data-gf-id``; stable while the element lives.
        role: ARIA role, or the tag's implicit role (``button``, ``textbox``, ``text``...).
        name: accessible name ('' when none).
        value: current value of a text field or select; None for other elements.
        states: ``focused``, ``checked``, ``selected``, ``disabled``, ``readonly``.
        depth: nesting level (0 = child of <body>).
    """

    id: int
    role: str
    name: str = ""
    value: str | None = None
    states: tuple[str, ...] = ()
    depth: int = 0

    @property
    def checked(self) -> bool:
        return "checked" in self.states

    @property
    def focused(self) -> bool:
        return "focused" in self.states

    def render(self) -> str:
        """The node as one line of text (see the module docstring)."""
        parts = [f"{'  ' * self.depth}[{self.id}] {self.role}"]
        if self.name:
            parts.append(json.dumps(self.name, ensure_ascii=False))
        if self.value is not None:
            parts.append("value=" + json.dumps(self.value, ensure_ascii=False))
        parts.extend(self.states)
        return " ".join(parts)


@dataclass(frozen=True)
class PageView:
    """What an agent is shown of a page: the instruction and the element tree.

    Attributes:
        instruction: the task's goal in words.
        nodes: the tree, in document order.
        url: the page's URL ('' when not shown).
    """

    instruction: str
    nodes: tuple[PageNode, ...] = field(default_factory=tuple)
    url: str = ""

    def ids(self) -> list[int]:
        return [n.id for n in self.nodes]

    def find(self, role: str | None = None, name: str | None = None) -> list[PageNode]:
        """Nodes with this role and/or exactly this name."""
        return [
            n
            for n in self.nodes
            if (role is None or n.role == role) and (name is None or n.name == name)
        ]

    def tree_text(self) -> str:
        return "\n".join(n.render() for n in self.nodes) or "(the page shows nothing)"


FORGET_IDS_JS = f"""
() => {{ document.querySelectorAll('[{ID_ATTRIBUTE}]').forEach(el => el.removeAttribute('{ID_ATTRIBUTE}'));
        window.__gfNextId = 1; }}
"""


async def forget_ids(page: Any) -> None:
    """Unstamps every element and restarts the numbering at 1, as on a freshly loaded page: an
    episode started inside a page that served one before gets the ids a fresh load would."""
    await page.evaluate(FORGET_IDS_JS)


async def snapshot_nodes(page: Any, skip_ids: tuple[str, ...] = ()) -> tuple[PageNode, ...]:
    """Stamps ids on ``page``'s elements and returns the tree.

    Args:
        page: a Playwright async ``Page``.
        skip_ids: DOM ids of elements to leave out with their subtree (a task's own HUD).
    """
    records = await page.evaluate(RENDER_JS, {"attr": ID_ATTRIBUTE, "skip_ids": list(skip_ids)})
    return tuple(
        PageNode(
            id=int(r["id"]),
            role=str(r["role"]),
            name=str(r.get("name") or ""),
            value=None if r.get("value") is None else str(r["value"]),
            states=tuple(r.get("states") or ()),
            depth=int(r["depth"]),
        )
        for r in records
    )


def parse_page_text(tree_text: str) -> tuple[PageNode, ...]:
    """Reads back the lines that :meth:`PageNode.render` wrote; other lines are ignored."""
    nodes = []
    decoder = json.JSONDecoder()
    for line in tree_text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        rest = m["rest"].strip()
        name, value = "", None
        if rest.startswith('"'):
            name, end = decoder.raw_decode(rest)
            rest = rest[end:].strip()
        if rest.startswith("value="):
            value, end = decoder.raw_decode(rest[len("value=") :])
            rest = rest[len("value=") + end :].strip()
        states = rest.split()
        nodes.append(
            PageNode(int(m["id"]), m["role"], name, value, tuple(states), len(m["indent"]) // 2)
        )
    return tuple(nodes)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD. A JavaScript string may hold half
    a UTF-16 pair (``String.fromCharCode(0xD800)``), which no UTF-8 encoder (tokenizer, store,
    export) takes; a Python ``str`` holds a valid pair as one code point, so any code point in
    U+D800..U+DFFF is a lone half."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def clean_data(value: Any) -> Any:
    """``value`` (strings, lists, dicts, anything else) with :func:`clean_text` applied to every
    string in it, keys included."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_data(k): clean_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(clean_data(v) for v in value)
    return value


def observation_text(view: PageView, feedback: str = "") -> str:
    """The observation an agent reads: instruction, page tree, then what the last action did
    (lone surrogates replaced, :func:`clean_text`)."""
    text = f"Task: {view.instruction}\n"
    if view.url:
        text += f"URL: {view.url}\n"
    text += f"Page:\n{view.tree_text()}\n"
    if feedback:
        text += f"\n{feedback}\n"
    return clean_text(text)


def parse_observation(text: str) -> PageView:
    """Reads back an :func:`observation_text` (the instruction and the nodes)."""
    instruction, url = "", ""
    head, _, tree = text.partition("\nPage:\n")
    for line in head.splitlines():
        if line.startswith("Task: "):
            instruction = line[len("Task: ") :]
        elif line.startswith("URL: "):
            url = line[len("URL: ") :]
    return PageView(instruction, parse_page_text(tree), url)
