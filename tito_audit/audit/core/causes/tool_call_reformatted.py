"""``tool-call-reformatted``: a tool call's arguments are re-serialized in history (spacing, key order, escaping), or,
with a parser, a call comes back in another layout than the model wrote it in (gpt-oss's harmony re-rendered in the
template's layout).

Detected on a text divergence as the last resort (:func:`detect`, asked by :mod:`.classify` when no other rule
explains it): the divergence does not lie in a message's text, a called tool's name is written just before it, and
the JSON object there parses to the same value on both sides or more than whitespace differs; the parse step gives it
to a control step that fails after a call in the model's own layout (:mod:`tito_audit.audit.parse_step.parsed_rollout`).
Confirmed from the definition, with the conversation's own calls: the JSON object written around the divergence is
(or holds) the arguments of one of the conversation's calls, parses to the same value on both sides, and is written
in other text.
"""

from __future__ import annotations

import json
import re

from tito_audit.audit.core.causes import content_rewritten
from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.divergence import Divergence
from tito_audit.audit.core.causes.interface import Cause

NAME = "tool-call-reformatted"
LINE = "Tool-call arguments are re-serialized in history: spacing, key order or escaping."
FIXED = "render tool calls as sampled"
UNFIXED = "the template re-serializes tool calls in a way no fix here undoes"

_WS = re.compile(r"\s+")
_LOOKAHEAD = 160
_LOOKBACK = 400
"""How far before a divergence the object holding it may begin."""


def _called_names(divergence: Divergence) -> list[str]:
    names = []
    for message in divergence.context.messages:
        for call in message.get("tool_calls") or []:
            name = (call.get("function") or {}).get("name")
            if isinstance(name, str):
                names.append(name)
    return divergence.context.forms(names)


def _json_equivalent(a: str, b: str) -> bool:
    """Whether the first JSON object in each window parses to the same value (reformatting only)."""
    decoder = json.JSONDecoder()
    values = []
    for window in (a, b):
        start = window.find("{")
        if start < 0:
            return False
        try:
            values.append(decoder.raw_decode(window[start:])[0])
        except ValueError:
            return False
    return values[0] == values[1]


def _squash(text: str) -> str:
    return _WS.sub("", text)


def detect(divergence: Divergence) -> bool:
    """Asked only when no other rule explains the divergence; else it is ``content-rewritten``."""
    if content_rewritten.in_message_text(divergence):
        return False
    earlier, later, index = divergence.earlier, divergence.later, divergence.index
    near = earlier[max(0, index - 300) : index + 40]
    in_tool_call = any(name in near for name in _called_names(divergence))
    if in_tool_call and _json_equivalent(earlier[max(0, index - 200) :], later[max(0, index - 200) :]):
        return True
    window_earlier = _squash(earlier[index : index + _LOOKAHEAD])[:60]
    if window_earlier and _squash(later[index : index + _LOOKAHEAD + 40]).startswith(window_earlier):
        return False  # only whitespace differs
    return in_tool_call


def _arguments(case: Case) -> list[object]:
    """The arguments of every call in the conversation, as values."""
    out = []
    for message in case.messages:
        for call in message.get("tool_calls") or []:
            arguments = (call.get("function") or {}).get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    continue
            out.append(arguments)
    return out


def _object_at(text: str, start: int) -> tuple[object, int] | None:
    try:
        value, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    return value, end


def _holds(value: object, arguments: list[object]) -> bool:
    """Whether ``value`` is one of ``arguments`` or a call object holding one (``{"name": …, "arguments": …}``)."""
    if value in arguments:
        return True
    return isinstance(value, dict) and any(inner in arguments for inner in value.values() if isinstance(inner, dict))


def confirm(case: Case) -> Confirmation:
    """The JSON object around the divergence holds a call's arguments, parses alike on both sides and reads
    otherwise."""
    earlier, later, index = case.earlier, case.later, case.index
    arguments = _arguments(case)
    start = earlier.rfind("{", max(0, index - _LOOKBACK), index + 1)
    while start >= 0:
        found, other = _object_at(earlier, start), _object_at(later, start)
        if found is not None and found[1] > index and _holds(found[0], arguments):
            same = other is not None and other[0] == found[0]
            text_later = later[start : other[1]] if other is not None else later[start : start + 60]
            return Confirmation(
                NAME,
                same and earlier[start : found[1]] != text_later,
                f"the same arguments serialized differently: {earlier[start : found[1]][:60]!r} vs {text_later[:60]!r}"
                if same
                else f"the arguments differ in value: {earlier[start : found[1]][:60]!r} vs {text_later[:60]!r}",
            )
        start = earlier.rfind("{", max(0, index - _LOOKBACK), start)
    return Confirmation(NAME, False, f"no call's arguments written as JSON where the renders part (character {index})")


CAUSE = Cause(NAME, LINE, confirm, fixed=FIXED, unfixed=UNFIXED)
