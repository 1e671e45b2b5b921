"""What a cause label is: the one shape every cause module declares (its ``CAUSE``), and the table reads.

A cause module holds the label's name (``NAME``, which the checks and the parse step emit as ``module.NAME``), its
contract line (``LINE``), where the audit detects it (its docstring) and a confirmation written from its definition
(``confirm``); it declares them together as ``CAUSE = Cause(NAME, LINE, confirm, ...)``, with what the fix search
says of the cause where it says something. Adding a cause: a module beside the others, its ``CAUSE`` in
:data:`tito_audit.audit.core.causes.CAUSES`, its entry in docs/contract.md ("Cause labels").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tito_audit.audit.core.causes.case import Case, Confirmation


@dataclass(frozen=True)
class Cause:
    """One cause label's definition."""

    name: str
    line: str
    """Its definition in one sentence (docs/contract.md, "Cause labels"; the pages' glossary)."""
    confirm: Callable[[Case], Confirmation]
    """A check written from the definition that the label holds on one failure."""
    quiet: bool = False
    """Every BPE model shows it: counted, never an example of its own."""
    fixed: str | None = None
    """What a fix that removes it does for the model (the way-out column), when a fix can."""
    unfixed: str | None = None
    """Why it stays when the fix search finds nothing that removes it."""
