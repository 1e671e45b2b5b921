"""The direct render path: transformers' compiled template called as ``render_jinja_template`` calls it, minus the
per-call conversion of the whole conversation, with renders remembered on the loaded model.

:class:`DirectTemplate` prepares each message once per conversation (not once per prefix) and asks the model's
:class:`~tito_audit.model.render_memo.RenderMemo` before it renders; :class:`~tito_audit.model.render.Renderer` checks
it against ``apply_chat_template`` on its first calls and now and again, and switches it off at a difference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tito_audit.model.load_folder import LoadedModel
from tito_audit.model.render_constants import constant_refusal
from tito_audit.model.render_guard import TEMPLATE_UTILS, RenderLimits, RenderTooLong, clock, guard
from tito_audit.model.render_memo import Refused, RenderKey, RenderMemo
from tito_audit.model.render_sizes import as_input
from tito_audit.model.threads import imported

if TYPE_CHECKING:
    from jinja2 import Template

Message = dict[str, Any]


@dataclass(frozen=True)
class Prepared:
    """A conversation as the template reads it (:meth:`DirectTemplate.prepare`), and what renders are remembered by."""

    chat: list[Any]
    tools: Any
    keys: list[str]
    """Each prepared message's ``repr``."""
    tools_key: str


def guarded_template(template_source: str, limits: RenderLimits | None = None) -> Any:
    """transformers' compiled template for ``template_source`` (compiled once per process), with the render
    guard installed (:mod:`tito_audit.model.render_guard`). A constant expression too big to compute is refused
    (:class:`RenderTooLong`, :class:`RenderTooLarge`) before transformers compiles the template (which would compute
    it)."""
    limits = limits or RenderLimits()
    refusal = constant_refusal(template_source, limits.max_chars, limits.max_bytes)
    if refusal is not None:
        raise refusal[0](refusal[1])
    compiled = imported(TEMPLATE_UTILS)._compile_jinja_template(template_source)
    guard(compiled, template_source)
    return compiled


@contextmanager
def frozen_clock(template_source: str | None, when: datetime) -> Iterator[None]:
    """Make ``strftime_now`` in ``template_source`` read ``when`` in this block, in this thread only.

    transformers compiles each template once into its own sandboxed environment; the guarded environment's
    ``strftime_now`` reads a per-thread clock (a kwarg would not do: kwargs reach the template only as plain
    data, and a function would arrive as a placeholder string).
    """
    if template_source is None:
        yield
        return
    with contextlib.suppress(RenderTooLong):  # refused again, with its reason, by the first render
        guarded_template(template_source)
    token = _FROZEN_AT.set(when)
    try:
        with clock(when):
            yield
    finally:
        _FROZEN_AT.reset(token)


_FROZEN_AT: ContextVar[datetime | None] = ContextVar("tito_audit_frozen_at", default=None)
"""The clock :func:`frozen_clock` froze in this thread, if any: part of what a remembered render is known by (outside
a frozen clock ``strftime_now`` reads the time, and no render is remembered)."""


def text_chars(value: Any) -> int:
    """The characters of text in ``value`` (strings inside dicts and lists included), counted without recursion."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


class DirectTemplate:
    """The compiled template called directly, as ``render_jinja_template`` calls it, minus the per-call
    conversion of the whole conversation (done once per conversation instead of once per prefix).

    Given a :class:`~tito_audit.model.render_memo.RenderMemo`, renders and refusals are remembered there by what the
    template reads (each prepared message by its ``repr``): a prefix rendered before by any renderer of the model with
    the same template and settings, from the same message objects or equal ones, is not rendered again."""

    VERIFY_FIRST = 24
    VERIFY_EVERY = 50

    MAX_PREPARED = 4096
    """Prepared messages kept (with the messages themselves, so that an id is never reused while kept)."""
    MAX_PREPARED_CHARS = 16_000_000
    """The characters of text the kept messages may hold in all (a few messages of megabytes would otherwise keep
    gigabytes alive); past either bound the preparations start again."""

    def __init__(
        self,
        compiled: Template,
        plain: Callable[..., Any],
        alias: Callable[..., Any],
        kwargs: dict[str, Any],
        memo: RenderMemo | None = None,
        source: str = "",
        limits: str = "",
    ) -> None:
        """``memo``: where renders are remembered (see the class docstring; None: every prefix is rendered), by the
        template's ``source``, its ``kwargs`` and the render ``limits`` (a render within one limit may not be within
        another)."""
        self.memo = memo
        self._memo_key = (source, repr(kwargs) + limits)
        self.compiled = compiled
        self.plain = plain
        self.alias = alias
        self.kwargs = kwargs
        self.calls = 0
        self._prepared: dict[int, tuple[Message, Any, str]] = {}
        self._prepared_chars = 0
        self._prepared_tools: tuple[list[dict], Any, str] | None = None

    @classmethod
    def create(
        cls, model: LoadedModel, kwargs: Mapping[str, Any], limits: RenderLimits, memo: RenderMemo | None = None
    ) -> DirectTemplate | None:
        if model.template_source is None:  # rendered without Jinja: nothing to compile
            return None
        try:
            utils = imported(TEMPLATE_UTILS)
            plain, alias = utils._plain_template_data, utils._alias_reasoning_fields
            compiled = guarded_template(model.template_source, limits)
        except Exception:  # another transformers version, or a template that does not compile
            return None
        template_kwargs = as_input(plain({**model.tokenizer.special_tokens_map, **kwargs}))
        return cls(compiled, plain, alias, template_kwargs, memo, model.template_source or "", repr(limits))

    def prepare(self, messages: Sequence[Message], tools: list[dict] | None) -> Prepared:
        """The template's view of ``messages`` and ``tools``: ``None`` values left out, plain JSON types, reasoning
        fields aliased, as ``render_jinja_template`` makes it, with what the memory of renders knows each by. Each
        message is prepared on its own (both steps work message by message) and kept: conversations that differ in
        one message (the reasoning forms of a turn) share the preparation of the others."""
        prepared: list[Any] = []
        keys: list[str] = []
        missing: list[int] = []
        for index, message in enumerate(messages):
            kept = self._prepared.get(id(message))
            if kept is not None and kept[0] is message:
                prepared.append(kept[1])
                keys.append(kept[2])
            else:
                prepared.append(None)
                keys.append("")
                missing.append(index)
        if missing:  # one call for all that are missing (most conversations are new)
            chars = sum(text_chars(messages[i]) for i in missing)
            if (
                len(self._prepared) + len(missing) > self.MAX_PREPARED
                or self._prepared_chars + chars > self.MAX_PREPARED_CHARS
            ):
                self._prepared.clear()
                self._prepared_chars = 0
            fresh = as_input(
                self.alias(self.plain([{k: v for k, v in messages[i].items() if v is not None} for i in missing]))
            )
            for index, value in zip(missing, fresh, strict=True):
                prepared[index] = value
                keys[index] = repr(value)
                self._prepared[id(messages[index])] = (messages[index], value, keys[index])
            self._prepared_chars += chars
        tools_value, tools_key = self._prepare_tools(tools)
        return Prepared(prepared, tools_value, keys, tools_key)

    def forget(self, messages: Sequence[Message], tools: list[dict] | None) -> None:
        """Drop the preparations of ``messages`` and ``tools`` (a session that ends gives its memory back)."""
        for message in messages:
            kept = self._prepared.get(id(message))
            if kept is not None and kept[0] is message:
                del self._prepared[id(message)]
                self._prepared_chars -= text_chars(message)
        if self._prepared_tools is not None and self._prepared_tools[0] is tools:
            self._prepared_tools = None

    def _prepare_tools(self, tools: list[dict] | None) -> tuple[Any, str]:
        if tools is None:
            return None, "None"
        kept = self._prepared_tools
        if kept is None or kept[0] is not tools:
            value = as_input(self.plain(tools))
            kept = self._prepared_tools = (tools, value, repr(value))
        return kept[1], kept[2]

    def _key(self, prepared: Prepared, k: int, gp: bool) -> RenderKey | None:
        """What a render is remembered by, with the frozen clock (None: no memory, or no frozen clock)."""
        at = _FROZEN_AT.get()
        if self.memo is None or at is None:
            return None
        return (*self._memo_key, at.isoformat(), prepared.tools_key, gp, tuple(prepared.keys[:k]))

    def remembered(self, prepared: Prepared, k: int, gp: bool) -> str | Refused | None:
        """The text of ``chat[:k]`` rendered before, or the template's refusal of it (see the class docstring)."""
        key = self._key(prepared, k, gp)
        return self.memo.get(key) if self.memo is not None and key is not None else None

    def remember(self, prepared: Prepared, k: int, gp: bool, outcome: str | Refused) -> None:
        """Keep a render's text, or the refusal the template itself raised (never a limit's)."""
        key = self._key(prepared, k, gp)
        if self.memo is not None and key is not None:
            self.memo.put(key, outcome)

    def render(self, prepared: Prepared, k: int, gp: bool) -> str:
        """The template's text for ``chat[:k]``, as ``Template.render`` gives it, minus Jinja's rewrite of an
        exception's traceback (it costs more than the render itself when a shape search meets refusal after
        refusal; :func:`~tito_audit.model.template_errors.template_line` reads the line from the frames as they are).
        """
        chat, tools = prepared.chat, prepared.tools
        template = self.compiled
        context = template.new_context(
            {"messages": chat[:k], "tools": tools, "documents": None, "add_generation_prompt": gp, **self.kwargs}
        )
        return template.environment.concat(template.root_render_func(context))

    def switched_off(self) -> bool:
        """Whether a renderer sharing this memory found the direct path unlike ``apply_chat_template`` here."""
        return self.memo is not None and self.memo.is_off(self._memo_key)

    def switch_off(self) -> None:
        """This template's direct renders differ from ``apply_chat_template``: none of them is remembered any more."""
        if self.memo is not None:
            self.memo.switch_off(self._memo_key)

    def should_verify(self) -> bool:
        """Whether this call's renders are checked against ``apply_chat_template``: the first calls and one in
        :attr:`VERIFY_EVERY` after, counted per template and settings across the renderers that share a memory (a
        way-out search makes a renderer per variant and proof), else per renderer."""
        self.calls = self.memo.count(self._memo_key) if self.memo is not None else self.calls + 1
        return self.calls <= self.VERIFY_FIRST or self.calls % self.VERIFY_EVERY == 0
