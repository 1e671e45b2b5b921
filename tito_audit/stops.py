"""Stop tokens: where an inference engine ends an assistant turn, and where each one came from.

Configs are often incomplete (no ``generation_config.json``, an old one without the tool-call
terminator), so besides the config and the tokenizer's ``eos_token`` we read the terminators the
template itself writes: the first control token after an assistant message's content, and after its
tool call, when that message is the last one (what the model emits when it stops). History may close
the turn differently; the audit reports that as ``stop-token-swap``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.conversation import Message
from tito_audit.render import Renderer, RenderError
from tito_audit.results import StopToken
from tito_audit.tokens import TokenCodec

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


def _probe_conversations() -> list[tuple[list[Message], str]]:
    """(messages, marker) pairs: the terminator is the first control token after the marker."""
    call = {
        "id": "probe0001",
        "type": "function",
        "function": {"name": "probe_lookup", "arguments": {"city": PROBE_ARGUMENT}},
    }
    answer: Message = {"role": "assistant", "content": PROBE_TEXT}
    calling: Message = {"role": "assistant", "content": "", "tool_calls": [call]}
    user: Message = {"role": "user", "content": "Hello"}
    return [([user, answer], PROBE_TEXT), ([user, calling], PROBE_ARGUMENT)]


def _first_control_after(text: str, start: int, codec: TokenCodec) -> str | None:
    best: tuple[int, str] | None = None
    for control in codec.control_ids_by_text:
        position = text.find(control, start)
        if position >= 0 and (
            best is None or position < best[0] or (position == best[0] and len(control) > len(best[1]))
        ):
            best = (position, control)
    return best[1] if best else None


def template_terminators(renderer: Renderer, codec: TokenCodec) -> list[str]:
    """Control tokens the template writes right after an assistant message's content or tool call."""
    found: list[str] = []
    for messages, marker in _probe_conversations():
        try:
            text = renderer.text(messages, _PROBE_TOOLS if "tool_calls" in messages[-1] else None, False)
        except RenderError:
            continue
        position = text.rfind(marker)
        if position < 0:
            continue
        control = _first_control_after(text, position + len(marker), codec)
        if control is not None and control not in found:
            found.append(control)
    return found


def collect_stop_tokens(
    renderer: Renderer, codec: TokenCodec, generation_eos_ids: Sequence[int], extra: Sequence[str] = ()
) -> list[StopToken]:
    """All stop tokens with their sources, sorted by id."""
    sources: dict[int, list[str]] = {}

    def add(token_id: int | None, source: str) -> None:
        if token_id is None:
            return
        entry = sources.setdefault(token_id, [])
        if source not in entry:
            entry.append(source)

    for token_id in generation_eos_ids:
        add(token_id, "generation_config.json eos_token_id")
    add(codec.eos_id, "tokenizer eos_token")
    for text in extra:
        add(codec.id_of(text), "--stop-token")
    for text in template_terminators(renderer, codec):
        add(codec.id_of(text), "template (turn terminator)")
    return [StopToken(id=i, text=codec.decode([i]), sources=s) for i, s in sorted(sources.items())]
