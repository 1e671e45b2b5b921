"""What a template fix is: the one shape every fix module declares (its ``FIX``), and the search reads.

A fix module holds the fix's name (``NAME``), the causes it addresses, what it changes and what the model sees
differently at inference, which renders it may change (``SCOPE`` in words, ``touches`` as a test: every other
render must stay byte-identical) and the edits it makes in a template's source; it declares them together as
``FIX = Fix(...)``. Adding a fix: a module beside the others and its ``FIX`` in
:data:`tito_audit.repair.fixes.REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tito_audit.conversations.conversation import Message
from tito_audit.repair.fixes.source import Edit, TemplateSource


@dataclass(frozen=True)
class FixContext:
    """What a fix may need beyond the template source."""

    clock: datetime
    """The date the audit renders with (``frozen-date`` writes it as the default)."""
    opening: str | None
    """What the generation prompt writes after the assistant header (``<think>\n``), if anything."""


@dataclass(frozen=True)
class Fix:
    """One template fix."""

    name: str
    causes: frozenset[str]
    """The cause labels it addresses."""
    changes: str
    """What it changes in the template, in one line."""
    at_inference: str
    """What the model sees differently at inference."""
    scope: str
    """Which renders it may change, in words."""
    find_edits: Callable[[TemplateSource, FixContext], list[Edit]]
    """The edits it makes in a template's source (none when the template lacks the construct)."""
    touches: Callable[[Sequence[Message], int, bool], bool]
    """``touches(messages, k, add_generation_prompt)``: whether it may change that render."""
