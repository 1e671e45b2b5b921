"""Values the parser rewrites (docs/contract.md "Written values"): an argument value the engine's parser gives back as
another value than the one the model wrote (vLLM's schema coercion reads ``2500.0`` for a ``number`` as the integer
``2500``; a string's surrounding whitespace trimmed; ``None`` read as the string ``"None"``).

Such a value is a written value, not the plain loop's verdict: a step that fails after the parser rewrote a value of
the turn before it is walked again with the model writing each rewritten value as the parser read it back
(:func:`as_read_back`). When the step then holds, the break was the written value's: the step counts as holding in
the verdict, and per value type the steps after a rewrite and those the rewrite broke are a rate beside the verdict,
with the parser named (:class:`RewriteTotals`).

>>> rewrites({"tool_calls": [{"function": {"name": "pay", "arguments": {"amount": 2500.0}}}]},
...          {"tool_calls": [{"function": {"name": "pay", "arguments": '{"amount": 2500}'}}]})
[Rewrite(call=0, name='amount', written=2500.0, read=2500)]
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field, replace
from typing import Any

from tito_audit.audit.conditions.undoings import identical
from tito_audit.audit.parse_step.value_literals import arguments_of, value_type, with_value
from tito_audit.audit.results import Failure, RewrittenValue
from tito_audit.conversations.conversation import Conversation, Message

STRING = "string"


@dataclass(frozen=True)
class Rewrite:
    """Argument ``name`` of call ``call``: the value written, and the value the parser read back."""

    call: int
    name: str
    written: Any
    read: Any

    @property
    def value_type(self) -> str:
        return value_type(self.written) or STRING


def rewrites(original: Message, parsed: Message) -> list[Rewrite]:
    """The argument values of ``original``'s calls that ``parsed`` gives back as other values (calls matched by
    position and name; an argument or call the parser lost is a lost call, not a rewritten value)."""
    found = []
    calls = zip(original.get("tool_calls") or [], parsed.get("tool_calls") or [], strict=False)
    for index, (before, after) in enumerate(calls):
        if (before.get("function") or {}).get("name") != (after.get("function") or {}).get("name"):
            continue
        written, read = arguments_of(before) or {}, arguments_of(after) or {}
        found += [
            Rewrite(index, name, value, read[name])
            for name, value in written.items()
            if name in read and not identical(_composed(value), _composed(read[name]))
        ]
    return found


def _composed(value: Any) -> Any:
    """``value`` with its strings in Unicode's composed form (NFC): a tokenizer that normalizes its input (Qwen2's)
    holds ``café`` written with a combining accent as the composed ``café``, which the parser then reads back: the
    tokenizer's doing, not the parser's, and the model's tokens hold no other value."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        return {_composed(key): _composed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_composed(item) for item in value]
    return value


def as_read_back(conversation: Conversation, by_turn: dict[int, list[Rewrite]]) -> Conversation:
    """``conversation`` with each rewritten value written as the parser read it back."""
    messages = list(conversation.messages)
    for turn, found in by_turn.items():
        for rewrite in found:
            messages[turn] = with_value(messages[turn], rewrite.call, rewrite.name, rewrite.read)
    return replace(conversation, messages=messages)


def _literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass
class _Tally:
    written: str = ""
    read: str = ""
    steps: int = 0
    differing: int = 0


@dataclass
class RewriteTotals:
    """A parser's rewritten values over a variant's conversations, per value type: the steps after a turn whose values
    it rewrote, and those that failed only for it (they hold with the values written as read back)."""

    tallies: dict[str, _Tally] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    """The first such failure of each value type (evidence; never counted in the verdict)."""

    def add_step(self, found: list[Rewrite], broke: set[str], failure: Failure | None) -> None:
        """One step after a turn whose values in ``found`` the parser rewrote; ``broke``: the value types whose rewrite
        broke it (it holds with them written as read back; ``failure``: its failure as walked)."""
        for kind in dict.fromkeys(rewrite.value_type for rewrite in found):
            first = next(rewrite for rewrite in found if rewrite.value_type == kind)
            tally = self.tallies.setdefault(kind, _Tally(_literal(first.written), _literal(first.read)))
            tally.steps += 1
            tally.differing += kind in broke
            if kind in broke and failure is not None and not any(f.category == kind for f in self.failures):
                detail = f"the model wrote {_literal(first.written)}, the parser read back {_literal(first.read)}"
                self.failures.append(replace(failure, category=kind, detail=detail))

    def add(self, other: RewriteTotals) -> None:
        for kind, tally in other.tallies.items():
            total = self.tallies.setdefault(kind, _Tally(tally.written, tally.read))
            total.steps += tally.steps
            total.differing += tally.differing
        for failure in other.failures:
            if not any(f.category == failure.category for f in self.failures):
                self.failures.append(failure)

    def result(self) -> list[RewrittenValue]:
        return [
            RewrittenValue(kind, tally.written, tally.read, tally.steps, tally.differing)
            for kind, tally in sorted(self.tallies.items())
        ]
