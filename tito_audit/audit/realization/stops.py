"""Stop tokens: where an inference engine ends an assistant turn, and where each one came from.

Sources, each reported with the token: the model's ``generation_config.json`` (``eos_token_id``), the
tokenizer's ``eos_token``, ``--stop-token``, the registry (facts from the generation configs of models whose
files are not all here, with where they were read) and the template itself.

From the template only text that ends every assistant message is taken: each way of writing a turn (an
answer, an answer after reasoning, one tool call, parallel tool calls) is rendered as the last message, and the
control tokens that close it (the run after its last text) are the candidates. A token the template also writes
*inside* a turn, followed by more of it, is a separator the model writes on its way, never a stop token (GigaChat3
closes every part of a turn with ``<|message_sep|>``, its text before a call included: a model stopped there could
never write the call). When the forms share a closing token, it ends every turn (``<|im_end|>`` after Kimi K2's
``<|tool_call_end|><|tool_calls_section_end|>``).
When they share none, each form has its own (gpt-oss: ``<|return|>`` after an answer, ``<|call|>`` after a
call): the first closing token of each form that the template never writes *inside* a message, followed by
more of it (the end of one call among several, a string delimiter inside a call). History may close a turn
differently; the audit reports that as ``stop-token-swap``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.audit.realization.reasoning_block import MARKER
from tito_audit.audit.results import StopToken
from tito_audit.conversations.conversation import ASSISTANT, USER, Message
from tito_audit.model.registry import registry_stop_tokens
from tito_audit.model.render import Renderer
from tito_audit.model.tokens import TokenCodec

PROBE_TEXT = "Probe answer qzxv"
PROBE_ARGUMENT = "qzxvcity"

_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "probe_lookup",
            "description": "Probe tool.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]

GENERATION_CONFIG = "generation_config.json eos_token_id"
TOKENIZER_EOS = "tokenizer eos_token"
TEMPLATE = "template (turn terminator)"


@dataclass(frozen=True)
class ProbeForm:
    """One way of writing an assistant turn, as the last message after a user message."""

    name: str
    messages: list[Message]
    tools: list[dict] | None


def _call(number: int, as_string: bool) -> dict:
    arguments: dict | str = {"city": PROBE_ARGUMENT}
    if as_string:
        arguments = json.dumps(arguments)
    return {
        "id": f"probe{number:04d}",
        "type": "function",
        "function": {"name": "probe_lookup", "arguments": arguments},
    }


def probe_forms(as_string: bool = False) -> list[ProbeForm]:
    """An answer, an answer after reasoning, one call and two parallel calls (arguments as dict or string)."""
    user: Message = {"role": USER, "content": "Hello"}
    answer: Message = {"role": ASSISTANT, "content": PROBE_TEXT}
    reasoned: Message = {**answer, "reasoning_content": MARKER}
    one: Message = {"role": ASSISTANT, "content": "", "tool_calls": [_call(1, as_string)]}
    two: Message = {"role": ASSISTANT, "content": "", "tool_calls": [_call(1, as_string), _call(2, as_string)]}
    return [
        ProbeForm("answer", [user, answer], None),
        ProbeForm("answer after reasoning", [user, reasoned], None),
        ProbeForm("tool call", [user, one], _PROBE_TOOLS),
        ProbeForm("parallel tool calls", [user, two], _PROBE_TOOLS),
    ]


@dataclass(frozen=True)
class _Piece:
    text: str
    control: bool


def _pieces(text: str, codec: TokenCodec) -> list[_Piece]:
    """``text`` cut into control tokens and the text between them."""
    pattern = codec.written_control_pattern
    if pattern is None:
        return [_Piece(text, False)] if text else []
    pieces, at = [], 0
    for match in pattern.finditer(text):
        if match.start() > at:
            pieces.append(_Piece(text[at : match.start()], False))
        pieces.append(_Piece(match.group(0), True))
        at = match.end()
    if at < len(text):
        pieces.append(_Piece(text[at:], False))
    return pieces


def _closing_run(pieces: Sequence[_Piece]) -> list[str]:
    """The control tokens after the message's last text (whitespace between them is not text)."""
    run: list[str] = []
    for piece in reversed(pieces):
        if piece.control:
            run.insert(0, piece.text)
        elif piece.text.strip():
            break
    return run


def _inside(pieces: Sequence[_Piece]) -> set[str]:
    """Control tokens followed by more of the message's text: they do not end it."""
    inside: set[str] = set()
    for index, piece in enumerate(pieces):
        if piece.control and any(not p.control and p.text.strip() for p in pieces[index + 1 :]):
            inside.add(piece.text)
    return inside


def _message_pieces(renderer: Renderer, codec: TokenCodec, form: ProbeForm) -> list[_Piece] | None:
    """The last message's rendering (from where it departs from the history before it), cut into pieces; None when
    the template refuses the form or does not show it (a dropped tool call)."""
    full = renderer.text_or_none(form.messages, form.tools, False)
    before = renderer.text_or_none(form.messages[:-1], form.tools, False)
    if full is None or before is None:
        return None
    shown = PROBE_ARGUMENT if form.messages[-1].get("tool_calls") else PROBE_TEXT
    if shown not in full[common_prefix_length(before, full) :]:
        return None
    return _pieces(full[common_prefix_length(before, full) :], codec)


def template_terminators(renderer: Renderer, codec: TokenCodec) -> list[str]:
    """Control tokens that end an assistant message in every way the template writes one (module docstring)."""
    rendered: dict[str, list[_Piece]] = {}
    for string_arguments in (False, True):
        for form in probe_forms(string_arguments):
            if form.name not in rendered:
                pieces = _message_pieces(renderer, codec, form)
                if pieces is not None:
                    rendered[form.name] = pieces
    runs = [run for run in (_closing_run(pieces) for pieces in rendered.values()) if run]
    if not runs:
        return []
    inside = set().union(*(_inside(pieces) for pieces in rendered.values()))
    shared = [token for token in runs[0] if all(token in run for run in runs[1:]) and token not in inside]
    if shared:  # one token closes every form: it ends the turn, whatever else the template writes with it
        return shared[:1]
    found: list[str] = []
    for run in runs:
        closing = [token for token in run if token not in inside]
        if closing and closing[0] not in found:
            found.append(closing[0])
    return found


def collect_stop_tokens(
    renderer: Renderer,
    codec: TokenCodec,
    generation_eos_ids: Sequence[int],
    extra: Sequence[str] = (),
    model_id: str | None = None,
    text_level_only: bool = False,
) -> list[StopToken]:
    """All stop tokens with their sources, sorted by id. The registry's facts are used where the vocabulary
    (and so the generation config's ids) is not here."""
    sources: dict[int, list[str]] = {}

    def add(token_id: int | None, source: str) -> None:
        if token_id is None:
            return
        entry = sources.setdefault(token_id, [])
        if source not in entry:
            entry.append(source)

    for token_id in generation_eos_ids:
        add(token_id, GENERATION_CONFIG)
    add(codec.eos_id, TOKENIZER_EOS)
    for text in extra:
        add(codec.id_of(text), "--stop-token")
    facts = registry_stop_tokens(model_id) if model_id is not None and text_level_only else None
    if facts is not None:
        for text in facts.texts:
            add(codec.id_of(text), f"registry: {facts.source}")
    for text in template_terminators(renderer, codec):
        add(codec.id_of(text), TEMPLATE)
    return [StopToken(id=i, text=codec.decode([i]), sources=s) for i, s in sorted(sources.items())]


def model_end_token(stop_tokens: Sequence[StopToken]) -> int | None:
    """The stop token a model samples to end a turn where its template writes none: the tokenizer's end of sequence
    when it is a stop token, else the first one the generation config, the registry or the user names (a token read
    only from the template's own terminators is not one: the template never wrote it there)."""
    for wanted in (TOKENIZER_EOS, GENERATION_CONFIG):
        for token in stop_tokens:
            if wanted in token.sources:
                return token.id
    for token in stop_tokens:
        if any(source != TEMPLATE for source in token.sources):
            return token.id
    return None
