"""What the engine hands its parser (SPEC "The parse step", "What the parser is given").

SGLang's detokenizer drops the stop token a generation ended on before the parsers see the text, with one exception:
when the server runs the ``gpt-oss`` tool-call parser it keeps ``<|call|>``, which the harmony parser needs to close
a call (``managers/detokenizer_manager.py``; ``<|return|>`` is still trimmed). A parser name not listed here gets the
text with its stop token trimmed.

>>> handed_text('...{"a": 1}<|call|>', "<|call|>", "gpt-oss"), handed_text("Hi<|im_end|>", "<|im_end|>", "qwen25")
('...{"a": 1}<|call|>', 'Hi')
"""

from __future__ import annotations

KEPT_STOPS: dict[str, frozenset[str]] = {"gpt-oss": frozenset({"<|call|>"})}
"""Tool-call parsers for which SGLang keeps the matched stop token in the text, and which tokens."""


def handed_text(text: str, stop: str | None, tool_parser: str | None) -> str:
    """``text`` (a completion that ended on ``stop``, None when it did not stop) as the engine hands it to the
    parsers: the stop token trimmed unless the tool-call parser keeps it."""
    if not stop or not text.endswith(stop):
        return text
    if stop in KEPT_STOPS.get(tool_parser or "", frozenset()):
        return text
    return text[: -len(stop)]
