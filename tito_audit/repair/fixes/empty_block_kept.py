"""``empty-block-kept``: history renders a turn's reasoning block whenever the turn has one, even an empty one.

Under a generation prompt that opens a reasoning block (``<think>\\n``) a model may close it at once. Many
templates test the reasoning's truth before they write the block, so the empty block the model wrote vanishes
from history (MiniMax-M2, Bielik), or is written another way (Nemotron 3 writes ``<think></think>``). The fix
makes those tests ask whether the turn carries reasoning at all, the reasoning field being a string:

    {%- if reasoning_content and loop.index0 > ns.last_user_index %}       (reasoning_content read from message)
        -> {%- if (reasoning_content or message.reasoning_content is string) and loop.index0 > ... %}
    {%- if message.reasoning_content is string and message.reasoning_content | trim | length > 0 %}
        -> {%- if message.reasoning_content is string and message.reasoning_content is string %}

A turn without a reasoning field renders as before. What changes for the model: a turn that closed its reasoning
block at once keeps that empty block in the prompt, as the model wrote it.
"""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.audit.core.causes import empty_think_dropped
from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.repair.fixes.interface import Fix
from tito_audit.repair.fixes.patterns import Edits, evaluated
from tito_audit.repair.fixes.source import Edit, TemplateSource, Token

NAME = "empty-block-kept"
CAUSES = frozenset({empty_think_dropped.NAME})
CHANGES = "history renders a turn's reasoning block whenever the turn has one, even empty"
AT_INFERENCE = "a turn that closed its reasoning block at once keeps the empty block in the prompt"
SCOPE = "renders with an assistant turn whose reasoning is an empty string"
REASONING_FIELDS = frozenset({"reasoning_content", "reasoning", "thinking"})
_BEFORE_CONJUNCT = frozenset({"if", "elif", "and", "or", "("})
_AFTER_CONJUNCT = frozenset({"and", "or", ")"})


def _in_assistant_turn(token: Token) -> bool:
    return token.in_message_loop and token.roles is not None and ASSISTANT in token.roles


def edits(source: TemplateSource, always: bool = False) -> list[Edit]:
    """The edits of this fix; with ``always`` those of :mod:`.empty_block_always` (every truth or string test of
    the reasoning field becomes ``true``)."""
    code = source.code()
    if_tags = _if_tags(code)
    tests = [t for t in evaluated(source) if _in_assistant_turn(t) and t.tag in if_tags]
    collected = Edits(tests, NAME)
    local_fields = _locals_read_from_field(code)
    for index, token in enumerate(tests):
        field = _field_at(tests, index)
        if field is not None and always:
            end = index + field[1]
            run = _length_test_at(tests, end + 1) or _string_test_at(tests, end + 1)
            if run or _conjunct(tests, index, end):
                collected.take(index, end + run, "true")
        elif field is not None:
            end = index + field[1]
            if _length_test_at(tests, end + 1):  # message.reasoning_content | trim | length > 0
                # when the test already asks for a string, the length test goes (folded away after the edit)
                asked = _tests_is_string(tests, token.tag, field[0])
                collected.take(
                    index, end + _length_test_at(tests, end + 1), "true" if asked else f"{field[0]} is string"
                )
            elif _conjunct(tests, index, end):  # message.reasoning_content and ...
                collected.take(index, end, f"{field[0]} is string")
        elif token.kind == "name" and token.text in local_fields and _conjunct(tests, index, index):
            collected.take(
                index, index, "true" if always else f"({token.text} or {local_fields[token.text]} is string)"
            )
    if always:
        collected.edits += _reads_as_text(source, if_tags)
    return collected.edits


def _reads_as_text(source: TemplateSource, if_tags: set[int]) -> list[Edit]:
    """Each read of the reasoning field whose value is written (``'<think>' + message.reasoning_content``, ``{% set
    rc = message.reasoning_content %}``), outside ``if`` tests and ``is`` tests, as ``(field if field is string else
    "")``: once the block is written for every turn, a turn without the field (absent, or None) writes it empty
    instead of raising in the addition."""
    reads = [t for t in evaluated(source) if _in_assistant_turn(t) and t.tag not in if_tags]
    out = []
    for index in range(len(reads)):
        field = _field_at(reads, index)
        if field is None:
            continue
        end = index + field[1]
        following = reads[end + 1] if end + 1 < len(reads) and reads[end + 1].tag == reads[end].tag else None
        if following is not None and following.text == "is":
            continue
        out.append(Edit(reads[index].start, reads[end].end, f'({field[0]} if {field[0]} is string else "")', NAME))
    return out


def touches(messages: Sequence[Message], k: int, gp: bool) -> bool:
    """Renders with an assistant turn whose reasoning is an empty string (only such turns render differently)."""
    return any(m.get("role") == ASSISTANT and any(m.get(f) == "" for f in REASONING_FIELDS) for m in messages[:k])


def _field_at(tokens: Sequence[Token], index: int) -> tuple[str, int] | None:
    """``(text, length - 1)`` of a message's reasoning field read at ``index`` (``message.reasoning_content``,
    ``message['reasoning_content']``), else None."""
    if index + 2 >= len(tokens) or tokens[index].kind != "name" or tokens[index].tag != tokens[index + 2].tag:
        return None
    name, following = tokens[index].text, tokens[index + 1].text
    if following == "." and tokens[index + 2].text in REASONING_FIELDS:
        return f"{name}.{tokens[index + 2].text}", 2
    if (
        following == "["
        and index + 3 < len(tokens)
        and tokens[index + 2].text.strip("'\"") in REASONING_FIELDS
        and tokens[index + 3].text == "]"
    ):
        return f"{name}.{tokens[index + 2].text.strip(chr(39) + chr(34))}", 3
    return None


def _length_test_at(tokens: Sequence[Token], index: int) -> int:
    """How many tokens a ``| trim | length > 0`` (or ``| length > 0``) test takes from ``index``; 0 if none."""
    for words in (["|", "trim", "|", "length", ">", "0"], ["|", "length", ">", "0"]):
        run = tokens[index : index + len(words)]
        if [t.text for t in run] == words and len({t.tag for t in run}) == 1:
            return len(words)
    return 0


def _string_test_at(tokens: Sequence[Token], index: int) -> int:
    """How many tokens an ``is string`` test takes from ``index``; 0 if none."""
    run = tokens[index : index + 2]
    return 2 if [t.text for t in run] == ["is", "string"] and len({t.tag for t in run}) == 1 else 0


def touches_absent_too(messages: Sequence[Message], k: int, gp: bool) -> bool:
    """Renders with an assistant turn whose reasoning is empty, absent or None (the renders
    :mod:`.empty_block_always` may change)."""
    return any(m.get("role") == ASSISTANT and not any(m.get(f) for f in REASONING_FIELDS) for m in messages[:k])


def _tests_is_string(tokens: Sequence[Token], tag: int, field: str) -> bool:
    """Whether the tag ``tag`` already tests ``field is string``."""
    words = [t.text for t in tokens if t.tag == tag]
    wanted = [*field.replace(".", " . ").split(), "is", "string"]
    return any(words[i : i + len(wanted)] == wanted for i in range(len(words)))


def _conjunct(tokens: Sequence[Token], first: int, last: int) -> bool:
    """Whether ``tokens[first..last]`` is tested for its truth alone: between ``if``/``and``/``or``/``(`` and
    ``and``/``or``/``)`` or the end of the test (never after ``not``, never compared or filtered)."""
    before = tokens[first - 1] if first > 0 and tokens[first - 1].tag == tokens[first].tag else None
    after = tokens[last + 1] if last + 1 < len(tokens) and tokens[last + 1].tag == tokens[last].tag else None
    opens = before is None or before.text in _BEFORE_CONJUNCT
    closes = after is None or after.text in _AFTER_CONJUNCT
    return opens and closes


def _locals_read_from_field(code: Sequence[Token]) -> dict[str, str]:
    """Variables set from a message's reasoning field in the assistant branch (``{% set reasoning_content =
    message.reasoning_content | default('') %}``): variable -> the field."""
    found: dict[str, str] = {}
    by_tag: dict[int, list[Token]] = {}
    for token in code:
        by_tag.setdefault(token.tag, []).append(token)
    for tag in by_tag.values():
        inner = [t for t in tag if t.kind not in ("block_begin", "block_end", "variable_begin", "variable_end")]
        texts = [t.text for t in inner]
        if len(inner) < 4 or texts[0] != "set" or texts[2] != "=" or not _in_assistant_turn(inner[0]):
            continue
        field = _field_at(inner, 3)
        if field is not None:
            found[texts[1]] = field[0]
    return found


def _if_tags(code: Sequence[Token]) -> set[int]:
    """The tags that are ``if``/``elif`` tests."""
    first: dict[int, str] = {}
    for token in code:
        if token.kind not in ("block_begin", "block_end", "variable_begin", "variable_end"):
            first.setdefault(token.tag, token.text)
    return {tag for tag, word in first.items() if word in ("if", "elif")}


FIX = Fix(
    NAME,
    CAUSES,
    CHANGES,
    AT_INFERENCE,
    SCOPE,
    find_edits=lambda source, context: edits(source),
    touches=touches,
)
