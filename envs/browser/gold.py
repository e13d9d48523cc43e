"""Scripted gold policies for MiniWoB++ tasks: they read the observation text and answer actions.

Each solver sees only what an agent sees (the instruction and the page tree, parsed back by
:func:`~gymfleet.envs.browser.page_text.parse_observation`) plus the turn number, and answers
one action in the env's action language. They prove a task is solvable through the env end to
end; they are not a model of a good agent.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gymfleet.envs.browser.page_text import PageNode, PageView, parse_observation

Solver = Callable[[PageView, int], str]

TEXT_FIELDS = ("textbox", "searchbox", "spinbutton")


class GoldPolicy:
    """A :class:`~gymfleet.envs.base.Policy` that asks a solver for each action."""

    def __init__(self, task: str, solver: Solver) -> None:
        self.task = task
        self.solver = solver
        self.turn = 0

    async def act(self, observation: str) -> str:
        action = self.solver(parse_observation(observation), self.turn)
        self.turn += 1
        return action


def _quoted(instruction: str) -> list[str]:
    return re.findall(r'"([^"]*)"', instruction)


def _first(view: PageView, role: str | tuple[str, ...], name: str | None = None) -> PageNode:
    roles = (role,) if isinstance(role, str) else role
    for node in view.nodes:
        if node.role in roles and (name is None or node.name == name):
            return node
    raise LookupError(f"no {role} named {name!r} on the page")


def _fields(view: PageView) -> list[PageNode]:
    return [n for n in view.nodes if n.role in TEXT_FIELDS]


def _fill_then_submit(view: PageView, values: list[str], submit: str = "Submit") -> str:
    """Fills the page's text fields in order with ``values``, then clicks ``submit``."""
    for field, value in zip(_fields(view), values, strict=False):
        if field.value != value:
            return f"fill({field.id}, {_q(value)})"
    buttons = [n for n in view.nodes if n.role == "button" and n.name.lower() == submit.lower()]
    return f"click({buttons[0].id})" if buttons else "noop()"


def _index(ordinal: str) -> int:
    """'1st' -> 0, '10th' -> 9."""
    return int(re.match(r"\d+", ordinal)[0]) - 1  # type: ignore[index]


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def click_test(view: PageView, turn: int) -> str:
    return f"click({_first(view, 'button').id})"


def click_test_2(view: PageView, turn: int) -> str:
    name = view.instruction.removeprefix("Click button ").rstrip(".")
    return f"click({_first(view, 'button', name).id})"


def click_button(view: PageView, turn: int) -> str:
    return f"click({_first(view, 'button', _quoted(view.instruction)[0]).id})"


def click_button_sequence(view: PageView, turn: int) -> str:
    return f"click({_first(view, 'button', 'ONE' if turn == 0 else 'TWO').id})"


def click_link(view: PageView, turn: int) -> str:
    target = _quoted(view.instruction)[0]
    node = next(n for n in view.nodes if n.role in ("text", "link") and n.name == target)
    return f"click({node.id})"


def click_checkboxes(view: PageView, turn: int) -> str:
    m = re.match(r"Select (.*) and click Submit\.", view.instruction)
    wanted = set() if m is None or m[1] == "nothing" else set(re.split(r", | and ", m[1]))
    for box in view.find("checkbox"):
        if (box.name in wanted) != box.checked:
            return f"click({box.id})"
    return f"click({_first(view, 'button', 'Submit').id})"


def click_option(view: PageView, turn: int) -> str:
    name = re.match(r"Select (.*) and click Submit\.", view.instruction)[1]  # type: ignore[index]
    radio = _first(view, "radio", name)
    return f"click({radio.id})" if not radio.checked else f"click({_first(view, 'button', 'Submit').id})"


def choose_list(view: PageView, turn: int) -> str:
    name = re.match(r"Select (.*) from the list and click Submit\.", view.instruction)[1]  # type: ignore[index]
    box = _first(view, ("combobox", "listbox"))
    if box.value != name:
        return f"select({box.id}, {_q(name)})"
    return f"click({_first(view, 'button', 'Submit').id})"


def enter_text(view: PageView, turn: int) -> str:
    return _fill_then_submit(view, [_quoted(view.instruction)[0]])


def enter_text_2(view: PageView, turn: int) -> str:
    word = _quoted(view.instruction)[0]
    word = word.lower() if "lower case" in view.instruction else word.upper()
    return _fill_then_submit(view, [word])


def enter_password(view: PageView, turn: int) -> str:
    password = _quoted(view.instruction)[0]
    return _fill_then_submit(view, [password, password])


def login_user(view: PageView, turn: int) -> str:
    username, password = _quoted(view.instruction)[:2]
    return _fill_then_submit(view, [username, password], submit="Login")


def focus_text(view: PageView, turn: int) -> str:
    return f"click({_fields(view)[0].id})"


def focus_text_2(view: PageView, turn: int) -> str:
    ordinal = re.search(r"the (\w+) input textbox", view.instruction)[1]  # type: ignore[index]
    return f"click({_fields(view)[_index(ordinal)].id})"


def simple_arithmetic(view: PageView, turn: int) -> str:
    problem = next(n.name for n in view.nodes if re.fullmatch(r"-?\d+ [+x-] -?\d+ =", n.name))
    a, op, b, _ = problem.split()
    answer = {"+": int(a) + int(b), "-": int(a) - int(b), "x": int(a) * int(b)}[op]
    return _fill_then_submit(view, [str(answer)])


def click_dialog(view: PageView, turn: int) -> str:
    return f"click({_first(view, 'button', 'Close').id})"


def click_tab(view: PageView, turn: int) -> str:
    name = re.search(r"Tab #\d+", view.instruction)[0]  # type: ignore[index]
    return f"click({_first(view, 'link', name).id})"


def find_word(view: PageView, turn: int) -> str:
    ordinal = re.search(r"the (\w+) word", view.instruction)[1]  # type: ignore[index]
    paragraph = _first(view, "paragraph").name
    word = re.sub(r"[^\w]", "", paragraph.split()[_index(ordinal)])
    return _fill_then_submit(view, [word])


def read_table(view: PageView, turn: int) -> str:
    key = re.match(r"Enter the value of (.*) into the text field", view.instruction)[1]  # type: ignore[index]
    cells = [n.name for n in view.nodes if n.role == "cell"]
    return _fill_then_submit(view, [cells[cells.index(key) + 1]])


SOLVERS: dict[str, Solver] = {
    "click-test": click_test,
    "click-test-2": click_test_2,
    "click-button": click_button,
    "click-button-sequence": click_button_sequence,
    "click-link": click_link,
    "click-checkboxes": click_checkboxes,
    "click-option": click_option,
    "choose-list": choose_list,
    "enter-text": enter_text,
    "enter-text-2": enter_text_2,
    "enter-password": enter_password,
    "login-user": login_user,
    "focus-text": focus_text,
    "focus-text-2": focus_text_2,
    "simple-arithmetic": simple_arithmetic,
    "click-dialog": click_dialog,
    "click-tab": click_tab,
    "find-word": find_word,
    "read-table": read_table,
}


def gold_policy_for(task: str) -> GoldPolicy | None:
    """A fresh gold policy for MiniWoB task ``task``, or None when none is scripted."""
    solver = SOLVERS.get(task)
    return GoldPolicy(task, solver) if solver is not None else None


def gold_first(tasks: list[str]) -> list[str]:
    """``tasks`` with those that have a gold policy first (each part keeps its order)."""
    return [t for t in tasks if t in SOLVERS] + [t for t in tasks if t not in SOLVERS]
