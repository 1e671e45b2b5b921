"""Completions in the layout a family's model writes, where it differs from the template's history layout
(docs/contract.md, "What the parser is given").

A template renders earlier turns in its history layout; the model, at generation time, writes the layout it was
trained to produce, and the engine's parser is written for that one. gpt-oss is the documented case: its template
writes a call in history as ``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{…}<|call|>``,
while the model writes (and SGLang's gpt-oss detector parses) the harmony layout
``<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>``. A loop that
keeps what the model wrote and re-renders that turn from the parsed message gets the history layout back: a
``tool-call-reformatted`` break, not a lost call.

Which model writes which layout is a registry fact (``output_layouts`` in ``tito_audit/data/families.json``, with its
source); the rewrite of a completion's text is here, one function per layout.

>>> HARMONY.rewrite(' to=functions.move<|channel|>commentary json<|message|>{"d": 1}<|call|>')
'<|channel|>commentary to=functions.move <|constrain|>json<|message|>{"d": 1}<|call|>'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tito_audit.model.registry import registry_output_layout


@dataclass(frozen=True)
class OutputLayout:
    name: str
    rewrite: Callable[[str], str]
    """The completion's text as the model writes it (unchanged where the layouts agree)."""


_HARMONY_CALL = re.compile(r" to=(functions\.[^\s<]+)<\|channel\|>commentary json<\|message\|>")


def _harmony(text: str) -> str:
    return _HARMONY_CALL.sub(r"<|channel|>commentary to=\1 <|constrain|>json<|message|>", text)


HARMONY = OutputLayout("harmony", _harmony)
LAYOUTS: dict[str, OutputLayout] = {layout.name: layout for layout in (HARMONY,)}


def output_layout(model_id: str | None) -> OutputLayout | None:
    """The layout ``model_id``'s model writes when the registry records one that differs from its template's."""
    name = registry_output_layout(model_id) if model_id else None
    return LAYOUTS.get(name) if name else None
