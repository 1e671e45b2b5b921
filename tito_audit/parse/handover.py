"""What the engine hands its parser (SPEC "The parse step", "What the parser is given").

One function, :func:`hand_over`, gives the text a parser is handed, for the audit's rollout and for the engines'
side-by-side page alike; it follows the parser's engine (``parser.engine``).

SGLang's detokenizer drops the stop token a generation ended on before the parsers see the text, with one exception:
when the server runs the ``gpt-oss`` tool-call parser it keeps ``<|call|>``, which the harmony parser needs to close
a call (``managers/detokenizer_manager.py``; ``<|return|>`` is still trimmed). A parser name not listed here gets the
text with its stop token trimmed.

>>> handed_text('...{"a": 1}<|call|>', "<|call|>", "gpt-oss"), handed_text("Hi<|im_end|>", "<|im_end|>", "qwen25")
('...{"a": 1}<|call|>', 'Hi')
"""

from __future__ import annotations

import re
from typing import Any

KEEPS_SPECIAL_TOKENS = frozenset({"gpt-oss", "gemma4"})
"""Tool-call parsers whose models SGLang always decodes with special tokens (harmony and Gemma 4 parse them); for
the others, a request that declares no tools is decoded without them (``skip_special_tokens``)."""

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


def tool_parser_of(parser: Any) -> str | None:
    """The engine's tool-call parser's name, when ``parser`` is an engine's (its ``tool``)."""
    tool = getattr(parser, "tool", None)
    return tool if isinstance(tool, str) else None


def hand_over(parser: Any, text: str, stop: str | None, tools_declared: bool, control: re.Pattern | None) -> str:
    """``text`` (a completion that ended on ``stop``; None: it did not stop, cut at the token limit) as the engine of
    ``parser`` hands it to the parser: the stop token trimmed unless the tool-call parser keeps it, and, for a
    request that declares no tools, the model's control tokens (``control``: the pattern that finds them) skipped
    where the engine skips them."""
    tool = tool_parser_of(parser)
    handed = handed_text(text, stop, tool)
    if not tools_declared and tool not in KEEPS_SPECIAL_TOKENS and control is not None:
        handed = control.sub("", handed)
    return handed
