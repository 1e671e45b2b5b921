"""The stand-in model: token ids of a prompt in, token ids of the completion the model family would write out.

It reads nothing but the prompt's ids, as a served model does. The prompt's text gives it:

- the **tools** it may call, read back in the layout the template declares them (:mod:`.declared_tools`);
- how many **tool results** it holds (a result's rendering, learnt from the template: :class:`ResultMarker`);
- what comes **last**: a user message or a tool result (the ending the template writes after each, learnt by rendering
  both: :class:`Endings`), so that the turn is written after the same generation prompt.

The turn (:mod:`.turn_plan`) is then written as the audit writes a model's turn: a conversation that ends like the
prompt, with the turn appended, is rendered and aligned by the audit's realization
(:func:`tito_audit.audit.realization.realize.realize`: the reasoning form the generation prompt admits, the block
closed at once as the model writes it, the model's text after the generation prompt), in the layout the family's
model writes (:mod:`tito_audit.parse.output_layouts`: harmony for gpt-oss), encoded and cut after its first stop token.

Every draw is seeded by the engine's seed, the names of the declared tools, the number of results, the prompt's ending,
the request's own ``seed`` and how many times the engine was asked that before: never by the rest of the text, so a
date or a folder name in a harness's system prompt changes nothing, and the rollouts of one prompt differ.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tito_audit.audit.core.causes.divergence import token_boundary
from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.audit.generation import call_ids
from tito_audit.audit.realization.realize import GEN_PROMPT_MISMATCH, realize, turn_keys
from tito_audit.audit.realization.reasoning_block import probe_block
from tito_audit.audit.realization.stops import model_end_token
from tito_audit.conversations.conversation import ASSISTANT, SYSTEM, TOOL, USER, Conversation, Message
from tito_audit.gateway.standin.declared_tools import PROBE_TOOLS, ToolReader, learn_reader
from tito_audit.gateway.standin.instructions import read_asked
from tito_audit.gateway.standin.turn_plan import Habits, as_answer, plan_turn, without_parallel_calls
from tito_audit.model.registry import TEXT_BEFORE_CALLS, registry_habit, registry_parsers
from tito_audit.model.render import RenderError
from tito_audit.parse.output_layouts import OutputLayout, output_layout
from tito_audit.session.machinery import Machinery

AFTER_USER = "user"
AFTER_TOOL = "tool"
_TASK = "Please look around this folder and tell me what is in it."
_RESULT = "README.md notes.txt"
_SYSTEM = "You are a helpful assistant."
MAX_KEYS = 1 << 16
"""Distinct draw keys whose counts are kept (past it the counts start again)."""


@dataclass(frozen=True)
class StandinTurn:
    """One completion: its ids (cut after the first stop id, or at ``max_tokens``), how it finished, the stop id it
    ended on, the message it was written from and its text."""

    ids: list[int]
    finish_reason: str
    matched: int | None
    message: Message
    text: str


@dataclass(frozen=True)
class Ending:
    """A conversation that ends one way (after a user message, after a tool result), and the text its prompt ends
    with after the last message's own text."""

    kind: str
    messages: list[Message]
    tail: str


@dataclass(frozen=True)
class ResultMarker:
    """What the template writes before a tool result's text (the tool's name in it may be any name)."""

    pattern: re.Pattern[str]

    def count(self, text: str) -> int:
        return len(self.pattern.findall(text))


class StandinModel:
    """The stand-in model of ``machinery``'s model (see the module docstring); thread safe."""

    def __init__(self, machinery: Machinery, seed: int = 0, clock: datetime | None = None) -> None:
        from tito_audit.model.render import DEFAULT_CLOCK

        self.machinery = machinery
        self.seed = seed
        self.clock = clock or DEFAULT_CLOCK
        self.model_id = machinery.loaded.resolved.model_id
        self._counts: dict[str, int] = {}
        self._counts_lock = threading.Lock()
        self.block = probe_block(self._render)
        self.id_form, _ = call_ids(self._render, self.model_id)
        self.endings = self._endings()
        after_user = self.endings[0]
        prompt = self._render(after_user.messages, PROBE_TOOLS, True) or ""
        self.reader: ToolReader | None = learn_reader(prompt)
        self.header = _assistant_header(self._render(after_user.messages, PROBE_TOOLS, False) or "", prompt)
        self.marker = self._result_marker()
        self.layout: OutputLayout | None = output_layout(self.model_id)
        self.habits = self._habits()
        self.end_id = model_end_token(machinery.stop_tokens)

    # -- what the template shows, learnt once -------------------------------------------------------------------------
    def _render(self, messages: Sequence[Message], tools: list[dict] | None, gp: bool) -> str | None:
        machinery = self.machinery
        with machinery.lock, machinery.rendering(self.clock):
            return machinery.renderer.text_or_none(messages, tools, gp)

    def _render_prefixes(self, messages: Sequence[Message], tools: list[dict] | None, keys: Sequence) -> dict:
        machinery = self.machinery
        with machinery.lock, machinery.rendering(self.clock):
            return machinery.renderer.prefixes(messages, tools, keys)

    def _endings(self) -> list[Ending]:
        system: list[Message] = [{"role": SYSTEM, "content": _SYSTEM}]
        user: list[Message] = [{"role": USER, "content": _TASK}]
        head = system + user if self._render(system + user, PROBE_TOOLS, True) is not None else user
        call_id = self.id_form.make(random.Random(0), PROBE_TOOLS[1]["function"]["name"], 0)
        call = {"id": call_id, "type": "function", "function": {"name": "probe_list_qzxv", "arguments": {"path": "."}}}
        after_tool = [
            *head,
            {"role": ASSISTANT, "content": "", "tool_calls": [call]},
            {"role": TOOL, "tool_call_id": call_id, "name": "probe_list_qzxv", "content": _RESULT},
        ]
        endings = []
        for kind, messages, last in ((AFTER_USER, head, _TASK), (AFTER_TOOL, after_tool, _RESULT)):
            prompt = self._render(messages, PROBE_TOOLS, True)
            if prompt is not None and last in prompt:
                endings.append(Ending(kind, messages, prompt[prompt.rfind(last) + len(last) :]))
        if not endings or endings[0].kind != AFTER_USER:
            endings.insert(0, Ending(AFTER_USER, head, ""))
        return endings

    def _result_marker(self) -> ResultMarker | None:
        """The text the template writes before a tool result (after the call turn's stop token, the tool's name in it
        any name), learnt from the conversation that ends with one; None when the template writes no result, or
        writes that text elsewhere too."""
        tool_ending = next((e for e in self.endings if e.kind == AFTER_TOOL), None)
        after = self._render(tool_ending.messages, PROBE_TOOLS, False) if tool_ending is not None else None
        if after is None or _RESULT not in after:
            return None
        before_result = after[: after.rfind(_RESULT)]
        stops = [self.machinery.codec.decode([i]) for i in self.machinery.stop_ids]
        turn_end = max((before_result.rfind(t) + len(t) for t in stops if t and t in before_result), default=-1)
        if turn_end < 0:
            return None
        lead = before_result[turn_end:].lstrip()
        name = "probe_list_qzxv"
        if name in lead:
            left, right = lead.split(name, 1)
            pattern = re.compile(re.escape(left) + r"[\w.\-]+" + re.escape(right))
        elif lead.strip():
            pattern = re.compile(re.escape(lead))
        else:
            return None
        marker = ResultMarker(pattern)
        with_user = self._render(self.endings[0].messages, PROBE_TOOLS, True) or ""
        return marker if marker.count(after) == 1 and marker.count(with_user) == 0 else None

    def _habits(self) -> Habits:
        parsers = [registry_parsers(self.model_id, engine) for engine in ("sglang", "vllm")]
        documented = [p for p in parsers if p is not None]
        reasons = self.block is not None and (not documented or any(p.reasoning for p in documented))
        habit = registry_habit(self.model_id)
        before_calls = habit.rare_share if habit is not None and habit.habit == TEXT_BEFORE_CALLS else None
        return Habits(reasons or before_calls is not None, before_calls, self.id_form)

    # -- one completion -----------------------------------------------------------------------------------------------
    def complete(
        self, prompt_ids: Sequence[int], max_tokens: int | None, stop_ids: Sequence[int], request_seed: Any = None
    ) -> StandinTurn:
        """The completion of ``prompt_ids`` (see the module docstring)."""
        codec = self.machinery.codec
        with self.machinery.lock:
            text = codec.decode(prompt_ids)
        first = text.find(self.header) if self.header else -1
        declarations = text[:first] if first >= 0 else text
        tools = self.reader.read(declarations) if self.reader is not None else []
        ending = self._ending_of(text)
        asked = read_asked(declarations, self._last_message(text, ending), text, bool(tools))
        since = text[max(first, asked.done_at) :] if first >= 0 else ""
        answered = asked.done + self._turns_taken(since)
        names = ",".join(sorted(t["function"]["name"] for t in tools))
        rng = random.Random(self._draw_key(f"{names}|{answered}|{ending.kind}|{asked.key}|{request_seed}"))
        message = plan_turn(rng, tools, answered, answered, self.habits, asked)
        written, message = self._written(ending, tools, message)
        return self._ids(written, message, max_tokens, stop_ids)

    def _turns_taken(self, history: str) -> int:
        """How many looks the model took in ``history``: the tool results in it, or where a harness sends results
        back as text (smolagents' ``Observation:``, mini-swe-agent's text-based loop) its own turns."""
        turns = max(history.count(self.header) - 1, 0) if self.header else 0
        results = self.marker.count(history) if self.marker is not None else 0
        return results or turns

    def _last_message(self, text: str, ending: Ending) -> str:
        """The text of the prompt's last message: after the last token the template writes around messages, before
        the generation prompt."""
        body = text[: len(text) - len(ending.tail)] if ending.tail and text.endswith(ending.tail) else text
        pattern = self.machinery.codec.written_added_pattern
        start = 0
        if pattern is not None:
            for match in pattern.finditer(body):
                start = match.end()
        return body[start:]

    def _draw_key(self, key: str) -> str:
        with self._counts_lock:
            if len(self._counts) >= MAX_KEYS and key not in self._counts:
                self._counts.clear()
            count = self._counts.get(key, 0)
            self._counts[key] = count + 1
        return f"standin:{self.seed}:{key}:{count}"

    def _ending_of(self, text: str) -> Ending:
        matching = [e for e in self.endings if e.tail and text.endswith(e.tail)]
        if matching:
            return max(matching, key=lambda e: len(e.tail))
        return max(self.endings, key=lambda e: _common_suffix(e.tail, text))

    def _written(self, ending: Ending, tools: list[dict], message: Message) -> tuple[str, Message]:
        """The model's text for ``message`` after ``ending``, as the realization aligns it (the message as written:
        its reasoning form may be the nearest the prompt admits; a turn the template refuses, or whose calls it does
        not write, is retried with one call, then as an answer). As in the audit, a turn whose rendering does not
        follow the generation prompt is the text after their common prefix (a ``gen-prompt-mismatch``)."""
        attempts = [message]
        if len(message.get("tool_calls") or []) > 1:
            attempts.append(without_parallel_calls(message))
        if message.get("tool_calls"):
            attempts.append(as_answer(message))
        for attempt in attempts:
            found = self._realized(ending, tools, attempt)
            if found is not None:
                return found
        raise RenderError("the template refuses every turn the stand-in model could write here")

    def _realized(self, ending: Ending, tools: list[dict], message: Message) -> tuple[str, Message] | None:
        called = {c["function"]["name"] for c in message.get("tool_calls") or []}
        offered = [PROBE_TOOLS[1], *(t for t in tools if t["function"]["name"] in called)]
        messages = [*ending.messages, message]
        conversation = Conversation("standin", messages, offered)
        try:
            renders = self._render_prefixes(messages, offered, turn_keys(messages))
            realized = realize(conversation, renders, self._render_prefixes, block=self.block)
        except RenderError:
            return None
        turn = len(messages) - 1
        alignment = realized.alignments[turn]
        full = realized.renders[(turn + 1, False)].text
        start = alignment.completion_start
        if alignment.status == GEN_PROMPT_MISMATCH:  # the model's text begins where the renders part, at a whole token
            start = token_boundary(full, start, self.machinery.codec.written_added_pattern)
        text = alignment.model_text if alignment.model_text is not None else full[start:]
        if any(name not in text for name in called):  # the template does not write this turn's calls
            return None
        if self.layout is not None:
            text = self.layout.rewrite(text)
        return text, realized.conversation.messages[turn]

    def _ids(self, text: str, message: Message, max_tokens: int | None, stop_ids: Sequence[int]) -> StandinTurn:
        codec, stops = self.machinery.codec, set(stop_ids) or set(self.machinery.stop_ids)
        with self.machinery.lock:
            ids = codec.encode(text)
        cut = next((n + 1 for n, token in enumerate(ids) if token in stops), None)
        if cut is not None:
            ids = ids[:cut]
        elif self.end_id is not None:  # the model ends its turn where the template writes no stop token
            ids = [*ids, self.end_id]
        matched = ids[-1] if ids and ids[-1] in stops | {self.end_id} else None
        finish = "stop" if matched is not None else "length"
        if max_tokens is not None and len(ids) > max_tokens:
            ids, finish, matched = ids[:max_tokens], "length", None
        with self.machinery.lock:
            written = codec.decode(ids)
        return StandinTurn(ids, finish, matched, message, written)


def _assistant_header(history: str, prompt: str) -> str:
    """The first line of the generation prompt (``<|im_start|>assistant``): where the history's first assistant turn
    begins, so that declarations are read before it."""
    generation_prompt = prompt[common_prefix_length(history, prompt) :].strip()
    return generation_prompt.split("\n", 1)[0] if generation_prompt else ""


def _common_suffix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[-1 - i] == b[-1 - i]:
        i += 1
    return i
