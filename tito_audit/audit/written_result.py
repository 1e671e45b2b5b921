"""What the model writes, through the parser into the next prompt, as the report keeps it (a part of :mod:`.results`):
layouts and values beside the verdict, never in it (docs/contract.md "What models write", "Written values")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WrittenLayout:
    """Tool steps after turns whose model wrote its call or content in another layout than the template's
    (docs/contract.md "What models write"): how often the next prompt, rendered from the parsed message, no longer
    continues the buffer. Reported beside the verdict, never folded into it."""

    layout: str
    """``compact JSON arguments``, ``arguments in another key order`` or ``content with surrounding whitespace``."""
    steps: int
    differing: int


@dataclass
class WrittenValue:
    """Argument values of one JSON type written in the template's own literal or in the JSON literal, through the
    parser into the next prompt (docs/contract.md "Written values"; :mod:`tito_audit.audit.parse_step.written_values`).
    Beside the verdict, never in it."""

    value_type: str
    """``boolean``, ``null``, ``integer``, ``number``, ``array`` or ``object``."""
    template_literal: str
    """How the template writes such a value (``False``), when a JSON literal differs; ``json_literal``: that one."""
    json_literal: str
    values: int
    """Values of this type in tool-call turns followed by tool results, as the template writes them."""
    values_changed: int
    """Of those, the values the parser read back as another value, tokens holding (``None`` as ``"None"``; a lost
    call counts as ``call lost``). Always 0 with the perfect inverse."""
    steps: int
    """Tool steps after a turn whose model wrote one such value in a JSON literal the template does not write."""
    differing: int
    """Of those, the steps whose next prompt no longer continues the buffer (``value-rewritten``)."""
    steps_changed: int
    """Of those, the steps whose parsed value differs from the value written."""


@dataclass
class RewrittenValue:
    """Argument values of one JSON type that the engine's parser read back as another value (vLLM's schema coercion:
    ``2500.0`` as ``2500``): written values, beside the verdict, never in it (docs/contract.md "Written values";
    :mod:`tito_audit.audit.parse_step.value_rewrites`)."""

    value_type: str
    """The type of the value the model wrote: ``number``, ``string``, ``null``, …"""
    written: str
    """One such value as written (JSON), and as the parser read it back: ``2500.0`` and ``2500``."""
    read: str
    steps: int
    """Steps after a turn with a value of this type the parser rewrote."""
    differing: int
    """Of those, the steps that fail, and hold once the model writes the value as the parser reads it back."""
