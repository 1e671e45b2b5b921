"""``value-rewritten``: an argument value the model wrote in one literal comes back in the template's other literal
(JSON ``false`` parsed to a boolean and rendered again as ``False``; ``1e-7`` as ``1e-07``), so the next prompt no
longer continues the buffer. Reported per value type as a rate beside the verdict, and as a finding with the template
line where the template writes non-JSON literals.

Detected by the written-values walk (:mod:`tito_audit.audit.parse_step.written_values`) and the written-literals
finding (:mod:`tito_audit.audit.findings.written_literals`). Confirmed from the definition, on the failure's two
windows: where they part, each side writes a literal, the two literals read as the same value (in JSON or in the
template's Python reading) and are written differently.
"""

from __future__ import annotations

import json
import re

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.audit.core.diff import WINDOW_CHARS

NAME = "value-rewritten"
LINE = (
    "An argument value the model wrote in one literal comes back in the template's other literal (JSON false parsed "
    "and rendered again as False)."
)

_LITERAL = re.compile(r"[-+]?\d[\d.]*(?:[eE][-+]?\d+)?|\w+")
_PYTHON = {"True": True, "False": False, "None": None}


def _literal_at(text: str, at: int) -> str:
    """The literal (word or number) covering ``text[at]``, or starting right there."""
    return next((m.group(0) for m in _LITERAL.finditer(text) if m.start() <= at < m.end() or m.start() == at), "")


def _value(literal: str) -> tuple[bool, object]:
    if literal in _PYTHON:
        return True, _PYTHON[literal]
    try:
        return True, json.loads(literal)
    except ValueError:
        try:
            return True, float(literal)
        except ValueError:
            return False, None


def confirm(case: Case) -> Confirmation:
    """Both sides write a literal where they part, of the same value, in other text."""
    failure = case.failure
    if failure.char_index is None:
        return Confirmation(NAME, False, "the failure keeps no text windows")
    at = min(WINDOW_CHARS, failure.char_index)
    written, rendered = _literal_at(failure.expected_text, at), _literal_at(failure.actual_text, at)
    (read_written, value_written), (read_rendered, value_rendered) = _value(written), _value(rendered)
    same = (
        read_written
        and read_rendered
        and value_written == value_rendered
        and type(value_written) is type(value_rendered)
    )
    shown = bool(same) and written != rendered
    return Confirmation(
        NAME,
        shown,
        f"the model wrote {written!r}, history writes {rendered!r}" + ("" if shown else ": not the same value"),
    )


CAUSE = Cause(NAME, LINE, confirm)
