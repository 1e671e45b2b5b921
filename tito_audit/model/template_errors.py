"""What a template raised, in one line with the template line it was raised at.

Jinja compiles a template into Python code. Its own ``render`` rewrites the traceback of an exception so that the
template's frames carry template lines (in code objects named ``<template>``); a direct call of the compiled code
leaves the compiled code's own frames, whose lines are mapped back through the template's debug information here.
Either way the line is the innermost template frame's, Jinja's internal code passed over (the stand-in that raises
for an unknown filter), so it is the line that used the filter.
"""

from __future__ import annotations

import bisect
import functools
from typing import TYPE_CHECKING

from tito_audit.errors import one_line

if TYPE_CHECKING:
    from jinja2 import Template

TEMPLATE_FILENAME = "<template>"
"""The file name Jinja gives a template compiled from a string: its frames in a traceback carry template lines."""


@functools.lru_cache(maxsize=64)
def _code_to_template_lines(template: Template) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The compiled template's debug marks (Jinja parses them on every ask): their code lines in order, and the
    template line of each."""
    pairs = sorted(template.debug_info, key=lambda pair: pair[1])  # written in order already; stable if not
    return tuple(code for _, code in pairs), tuple(line for line, _ in pairs)


def _template_line_at(template: Template, code_line: int) -> int:
    """The template line of the last debug mark at or before ``code_line`` of the compiled code (1 when none)."""
    code_lines, template_lines = _code_to_template_lines(template)
    at = bisect.bisect_right(code_lines, code_line) - 1
    return template_lines[at] if at >= 0 else 1


def template_line(exc: BaseException) -> int | None:
    """The template line an exception was raised at (the innermost template frame of its traceback), if any."""
    from jinja2.utils import internal_code

    line = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        template = frame.f_globals.get("__jinja_template__")
        if frame.f_code in internal_code:
            pass
        elif template is not None:  # the compiled code itself (a direct render)
            line = _template_line_at(template, tb.tb_lineno)
        elif frame.f_code.co_filename == TEMPLATE_FILENAME:  # a frame Jinja's rewrite made
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def error_line(exc: BaseException, limit: int = 200) -> str:
    """``Type: message`` on one line, with ``(template line N)`` when the template itself raised it."""
    text = one_line(str(exc), limit) or "(no message)"
    line = template_line(exc)
    return f"{type(exc).__name__}: {text}" + (f" (template line {line})" if line is not None else "")
