"""The chat template as text deltas: what to append for a new message, a generation prompt, a turn end.

The gateway never re-renders and re-tokenises the conversation: it renders the template only to
learn the text a step adds, checks that the earlier rendering is an exact prefix of the new one
(else :class:`ChatTemplateError`, naming the step), and tokenises only that delta.

Renders and encodes are the gateway's CPU per call (benchmarks/harness_gateway.py). Where the
tokenizer allows, both skip transformers' per-call Python wrapping: the template is rendered by
its compiled Jinja template with the variables ``apply_chat_template`` passes (the special
tokens), and text is encoded by the fast tokenizer's Rust backend. Each shortcut is taken only if
it gives exactly ``apply_chat_template``'s text and ``tokenizer.encode``'s ids on every prefix of
:data:`PROBE_CONVERSATION` (both flags), checked once at construction; else the transformers call
is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymfleet.core.records import Message
from gymfleet.orchestrator.engines.errors import ChatTemplateError

PROBE_CONVERSATION = [
    Message("system", "You solve tasks in a terminal."),
    Message("user", "List the files."),
    Message("assistant", "```bash\nls -la\n```"),
    Message("tool", "total 0\ndrwxr-xr-x 2 root root 40 ."),
    Message("assistant", "The directory is empty."),
    Message("user", "Now create a.txt."),
]
"""Turns of the start-up check: system, user, assistant, tool, assistant, user."""


Render = Callable[[list[Message], bool], str]
"""``render(messages, add_generation_prompt)``: :meth:`ChatTemplate.render`, or a caller's memo of it."""


class ChatTemplate:
    """The tokenizer's chat template, used only through prefix-checked text deltas."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError("the tokenizer has no chat template: pick an instruct model or set one")
        self.tokenizer = tokenizer
        self.eos_id = int(tokenizer.eos_token_id)
        self.eos_text = tokenizer.decode([self.eos_id])
        self._jinja: Any = None
        self._jinja_vars: dict[str, Any] = {}
        self._backend: Any = None
        self.n_renders = 0
        """Renders so far (each a Jinja pass over the whole conversation: the cost the sessions' memo saves)."""
        self._take_shortcuts()
        self.n_renders = 0

    def render(self, messages: list[Message], add_generation_prompt: bool = False) -> str:
        """The template's text for ``messages``."""
        self.n_renders += 1
        chat = [{"role": m.role, "content": m.content} for m in messages]
        if self._jinja is not None:
            return self._jinja.render(messages=chat, tools=None, documents=None,
                                      add_generation_prompt=add_generation_prompt, **self._jinja_vars)
        return self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        """Token ids of a piece of rendered text (special tokens written in it are parsed)."""
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _take_shortcuts(self) -> None:
        """Uses the compiled Jinja template and the Rust tokenizer directly where they give exactly
        what ``apply_chat_template`` and ``tokenizer.encode`` give on the probe conversation."""
        probes = [(PROBE_CONVERSATION[:n], flag) for n in range(1, len(PROBE_CONVERSATION) + 1) for flag in (False, True)]
        expected = [self.render(m, f) for m, f in probes]
        try:
            from transformers.utils.chat_template_utils import _compile_jinja_template

            template = self.tokenizer.chat_template
            if isinstance(template, str):
                self._jinja = _compile_jinja_template(template)
                self._jinja_vars = {k: v for k, v in self.tokenizer.special_tokens_map.items() if isinstance(v, str)}
                if [self.render(m, f) for m, f in probes] != expected:
                    self._jinja = None
        except Exception:  # another transformers version, a template it cannot compile alone: the slow path
            self._jinja = None
        backend = getattr(self.tokenizer, "_tokenizer", None) if getattr(self.tokenizer, "is_fast", False) else None
        if backend is not None:
            texts = [*expected, *(m.content for m in PROBE_CONVERSATION), " x  y\n\t", "ünïcode ✓"]
            wanted = [list(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]
            try:
                if [backend.encode(t, add_special_tokens=False).ids for t in texts] == wanted:
                    self._backend = backend
            except Exception:
                self._backend = None

    def decode(self, token_ids: list[int]) -> str:
        """Text of generated ids, without special tokens (the assistant message content)."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def message_delta(self, history: list[Message], message: Message, render: Render | None = None) -> str:
        """Text that appending ``message`` after ``history`` adds (``render``: as the other
        deltas, a memo of :meth:`render` that a caller keeps across one conversation's turns).

        Raises:
            ChatTemplateError: the template renders ``history`` differently once ``message`` follows.
        """
        render = render or self.render
        before = render(history, False)
        after = render([*history, message], False)
        _require_prefix(before, after, f"appending a {message.role!r} message")
        return after[len(before) :]

    def generation_prompt(self, history: list[Message], render: Render | None = None) -> str:
        """Text that opens the assistant's turn after ``history``."""
        render = render or self.render
        before = render(history, False)
        after = render(history, True)
        _require_prefix(before, after, "adding the generation prompt")
        return after[len(before) :]

    def turn_end(self, history: list[Message], content: str, ended_with_eos: bool,
                 render: Render | None = None) -> str:
        """Text after the generated tokens that closes the assistant turn (e.g. ``"\\n"`` after EOS).

        Args:
            history: the conversation before the assistant turn.
            content: the generated text (special tokens removed).
            ended_with_eos: whether the generated ids already end with the EOS token.
        """
        render = render or self.render
        opened = render(history, True) + content
        closed = render([*history, Message("assistant", content)], False)
        _require_prefix(opened, closed, "closing an assistant turn (the template alters its content)")
        tail = closed[len(opened) :]
        if ended_with_eos:
            if not tail.startswith(self.eos_text):
                raise ChatTemplateError(
                    f"the template ends assistant turns with {tail!r}, not with the EOS token "
                    f"{self.eos_text!r} the model stops on: use a template that closes turns with EOS"
                )
            tail = tail[len(self.eos_text) :]
        return tail

    def check_prefix_property(self) -> None:
        """Start-up check: token ids built by appending deltas equal the full conversation's tokens.

        Replays :data:`PROBE_CONVERSATION` the way the gateway builds sessions (assistant turns
        as if generated, ending with EOS) and requires, after every turn, that the appended ids
        equal the tokenisation of the whole rendering, so earlier tokens stay a bit-exact prefix.

        Raises:
            ChatTemplateError: with the step and the first differing text or token.
        """
        history = [PROBE_CONVERSATION[0]]
        ids = self.encode(self.render(history))
        for message in PROBE_CONVERSATION[1:]:
            if message.role == "assistant":
                ids += self.encode(self.generation_prompt(history)) + self.encode(message.content) + [self.eos_id]
                ids += self.encode(self.turn_end(history, message.content, ended_with_eos=True))
            else:
                ids += self.encode(self.message_delta(history, message))
            history.append(message)
            expected = self.encode(self.render(history))
            if ids != expected:
                at = next((i for i, (a, b) in enumerate(zip(ids, expected)) if a != b), min(len(ids), len(expected)))
                raise ChatTemplateError(
                    f"after appending a {message.role!r} turn, the appended token ids differ from the "
                    f"tokenised conversation at token {at} ({ids[at:at + 5]} vs {expected[at:at + 5]}): "
                    "the template or tokenizer does not keep earlier tokens a bit-exact prefix"
                )


def _require_prefix(before: str, after: str, step: str) -> None:
    if after.startswith(before):
        return
    at = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
    raise ChatTemplateError(
        f"the chat template is not append-only: {step} changes the earlier text at character {at} "
        f"({before[at:at + 40]!r} became {after[at:at + 40]!r}). TITO needs earlier turns to render "
        "identically; use a template that does not rewrite past turns"
    )
