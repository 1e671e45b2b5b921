"""Cause labels (SPEC "Causes") for a divergence between an earlier and a later text.

Each rule looks at the two texts from their first differing character and at the conversation that
produced them; a divergence can carry several labels. The rules are evidence-based: a label is given
only when the texts show it (a reasoning string present earlier and missing later, an empty think block
gone, a different control token at the divergence, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tito_audit.conversations.conversation import ASSISTANT, Message

EMPTY_THINK = re.compile(
    r"<(think|thinking|seed:think|reasoning)>\s*</\1>"
    r"|<\|channel\|>analysis<\|message\|>\s*<\|end\|>"  # harmony (gpt-oss): an empty analysis message
)
_WS = re.compile(r"\s+")
_LOOKAHEAD = 160
_MAX_CONTROL = 64
_NEARBY = 48
"""How far after a divergence a message's text may begin (past the markup that opens it, gpt-oss's
``<|channel|>analysis<|message|>``) and still be the text the divergence is about."""


@dataclass(frozen=True)
class MessageRef:
    """The message whose rendering changed: its index, role, and whether it was last when first rendered."""

    index: int
    role: str
    was_last: bool
    content_end: int | None = None
    """Where its own text (content) ends in the compared text, when it could be located."""


@dataclass(frozen=True)
class TextContext:
    """What the classifier may know about the texts being compared."""

    messages: Sequence[Message]
    controls: Iterable[str]
    """Control-token texts the template writes."""
    stop_texts: Iterable[str]
    control_pattern: re.Pattern[str] | None = None
    """``controls`` as one alternation (longest first), when the caller has it compiled."""
    normalize: Callable[[str], str] | None = None
    """The tokenizer's normalizer, when it has one: rollout texts are compared normalized (Gemma writes spaces as
    ``▁``), so a message's text is looked for in both forms."""

    def forms(self, texts: Iterable[str]) -> list[str]:
        """``texts``, each also in its normalized form where that differs."""
        out: list[str] = []
        for text in texts:
            out.append(text)
            if self.normalize is not None and (normalized := self.normalize(text)) != text:
                out.append(normalized)
        return out


def _reasoning_strings(context: TextContext) -> list[str]:
    out = []
    for message in context.messages:
        value = message.get("reasoning_content")
        if isinstance(value, str) and value.strip():
            out.append(value.strip())
    return context.forms(out)


def _tool_call_names(context: TextContext) -> list[str]:
    names = []
    for message in context.messages:
        for call in message.get("tool_calls") or []:
            name = (call.get("function") or {}).get("name")
            if isinstance(name, str):
                names.append(name)
    return context.forms(names)


def _control_at(text: str, index: int, controls: Iterable[str], pattern: re.Pattern[str] | None = None) -> str | None:
    """The control-token string that covers ``text[index]`` (starting at or before it), if any."""
    if pattern is not None:
        start = max(0, index - _MAX_CONTROL)
        for match in pattern.finditer(text, start, index + _MAX_CONTROL):
            if match.start() <= index < match.end():
                return match.group(0)
        return None
    best = None
    for control in controls:
        start = text.rfind(control, max(0, index - len(control) + 1), index + len(control))
        if start != -1 and start <= index < start + len(control) and (best is None or len(control) > len(best)):
            best = control
    return best


def token_boundary(text: str, index: int, pattern: re.Pattern[str] | None) -> int:
    """``index``, moved back to the start of the control token whose text covers it (two renders that part
    inside a control token's text, as ``<|im_end|>`` and ``<|im_start|>`` do after ``<|im_``, part at the token).
    """
    if pattern is None or index <= 0:
        return index
    for match in pattern.finditer(text, max(0, index - _MAX_CONTROL), index + _MAX_CONTROL):
        if match.start() < index < match.end():
            return match.start()
    return index


def _squash(text: str) -> str:
    return _WS.sub("", text)


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


_STOP_PUSHED_BACK = 8
"""Characters of inserted text (a newline, a trimmed space) that may sit before a stop token the later render still
writes at the end of the same turn."""


def classify_text_divergence(
    earlier: str,
    later: str,
    index: int,
    context: TextContext,
    known: Sequence[str] = (),
    owner: MessageRef | None = None,
) -> list[str]:
    """Labels for ``earlier`` not being a prefix of ``later``; ``index`` is their first differing character.

    ``known`` are labels the caller established (``gen-prompt-mismatch``); they come first and the
    content/tool-call fallback is only used when no rule explains the divergence. ``owner`` is the message
    whose rendering changed (see :func:`tito_audit.audit.realization.realize.owner_of`): a tool, user or system message
    is either rewritten in its text or closed differently once something follows it.
    """
    labels: list[str] = list(known)
    controls = list(context.controls)
    stops = set(context.stop_texts)

    for reasoning in _reasoning_strings(context):
        found = earlier.find(reasoning, max(0, index - len(reasoning)))
        near_later = later[max(0, found - _LOOKAHEAD) : found + len(reasoning) + _LOOKAHEAD]
        if 0 <= found <= index + _LOOKAHEAD and reasoning not in near_later:
            labels.append("reasoning-pruned")
            break
    think = EMPTY_THINK.search(earlier, max(0, index - 16))
    dropped = think is not None and think.start() <= index + 2 and not later.startswith(think.group(0), think.start())
    if dropped and "empty-think-dropped" not in labels:
        labels.append("empty-think-dropped")
    if owner is not None and owner.role != ASSISTANT:
        # a tool, user or system message: rewritten in its text, or closed differently once followed
        if len(labels) == len(known):
            moved = _moved_in(earlier, later, index, context, next_message=owner.index + 1)
            labels.append("content-rewritten" if moved else _non_assistant_label(index, owner))
        return labels

    control_earlier = _control_at(earlier, index, controls, context.control_pattern)
    control_later = _control_at(later, index, controls, context.control_pattern)
    # where the renders part inside a control token, read from the token's start (Phi-4-mini's history ends
    # ``<|end|><|endoftext|>``, its next render ``<|end|><|user|>``: they part after ``<|``)
    at_token = token_boundary(earlier, index, context.control_pattern)
    rest = earlier[at_token:]
    # a stop token right after another one is not where the engine stopped: it stopped on the first (Phi-4-mini's
    # end-of-text, written after the last message only)
    stopped_before = any(earlier[:at_token].endswith(s) for s in stops)
    engine_stop = control_earlier in stops and control_later != control_earlier and not stopped_before

    # Text the template writes only after the last message: a newline after the end token, or the end token itself
    # when a following message of the same role would continue the block. Not when history writes another control
    # token where the engine stopped: then the stop token itself changes (below)
    tail = rest
    for stop in stops:
        tail = tail.replace(stop, "")
    after_stop = stopped_before or any(rest.startswith(s) for s in stops)
    tail_after_stop = (
        after_stop
        and bool(rest)
        and len(tail) <= 4
        and not tail.strip()
        and not any(c in tail for c in controls)
        and not (engine_stop and control_later)
    )

    if engine_stop:
        # another end token where the engine stopped; or none at all and the turn runs on into the next message's
        # text (a template merging consecutive assistant messages with a separator), unless the stop token is still
        # there a few characters on (pushed back by inserted text, named below) or only the tail after it differs
        pushed_back = control_earlier in later[index : index + len(control_earlier) + _STOP_PUSHED_BACK]
        if control_later or not (pushed_back or tail_after_stop):
            labels.append("stop-token-swap")
    if tail_after_stop:
        labels.append("tail-after-stop")

    if not labels:
        labels.append(_fallback(earlier, later, index, context))
    return labels


def _moved_in(earlier: str, later: str, index: int, context: TextContext, next_message: int) -> bool:
    """Whether ``later`` has, right at ``index``, the text of a message that ``earlier`` does not have there
    (a later system message merged into the system prompt, a system prompt moved to the last user turn).

    The text of the message right after the rewritten one (``next_message``) does not count, nor any text
    inside it: it comes next in any render, so finding it there means the rewritten message was closed
    differently once it was followed (Hermes 3 joins consecutive tool results in one block), not that text
    moved in.
    """
    messages = context.messages
    following = _message_text(messages[next_message]) if next_message < len(messages) else None
    followings = set(context.forms([following])) if following else set()
    for text in context.forms(_message_texts(messages)):
        if text in followings:
            continue
        window = index + len(text) + 40
        region = later[index : window + max((len(f) for f in followings), default=0)]
        for follower in followings:
            region = region.replace(follower, "\0")
        if text in region[: len(text) + 40] and earlier.find(text, index, window) < 0:
            return True
        # or a message's text that spans the divergence in ``later`` and is not in ``earlier`` there (a later system
        # message that replaced the system prompt begins like the one it replaced)
        spanning = later.rfind(text, max(0, index - len(text)), index + len(text))
        if 0 <= spanning <= index < spanning + len(text) and not earlier.startswith(text, spanning):
            return True
    return False


def _non_assistant_label(index: int, owner: MessageRef) -> str:
    """``closing-rewritten`` when the divergence lies after the message's own text (its end token or separator
    changed once another message followed it), else ``content-rewritten`` (its text, or what precedes it)."""
    if owner.content_end is not None:
        return "closing-rewritten" if owner.content_end <= index else "content-rewritten"
    return "closing-rewritten" if owner.was_last else "content-rewritten"


def _message_text(message: Message) -> str | None:
    """A message's text when it is long enough to be found again without false matches."""
    content = message.get("content")
    return content.strip() if isinstance(content, str) and len(content.strip()) >= 6 else None


def _message_texts(messages: Sequence[Message]) -> list[str]:
    return [text for text in map(_message_text, messages) if text is not None]


def _fallback(earlier: str, later: str, index: int, context: TextContext) -> str:
    """Rewritten message text or tool-call serialization, told apart by where the divergence lies."""
    for text in context.forms(_message_texts(context.messages)):
        found = earlier.find(text, max(0, index - len(text)))
        if 0 <= found <= index + 2:
            return "content-rewritten"  # the divergence lies in a message's text (changed, moved or dropped)
        if 0 <= found <= index + _NEARBY and later.find(text, max(0, index - _NEARBY), found + _NEARBY) < 0:
            return "content-rewritten"  # a message's text just after the divergence is gone from there

    near = earlier[max(0, index - 300) : index + 40]
    in_tool_call = any(name in near for name in _tool_call_names(context))
    if in_tool_call and _json_equivalent(earlier[max(0, index - 200) :], later[max(0, index - 200) :]):
        return "tool-call-reformatted"
    window_earlier = _squash(earlier[index : index + _LOOKAHEAD])[:60]
    if window_earlier and _squash(later[index : index + _LOOKAHEAD + 40]).startswith(window_earlier):
        return "content-rewritten"  # only whitespace differs
    return "tool-call-reformatted" if in_tool_call else "content-rewritten"
