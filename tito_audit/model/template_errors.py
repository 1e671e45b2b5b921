"""What a template raised, in one line with the template line it was raised at.

Jinja compiles a template into Python code. Its own ``render`` rewrites the traceback of an exception so that the
template's frames carry template lines (in code objects named ``<template>``); a direct call of the compiled code
leaves the compiled code's own frames, whose lines are mapped back through the template's debug information here.
Either way the line is the innermost template frame's, Jinja's internal code passed over (the stand-in that raises
for an unknown filter), so it is the line that used the filter.
"""

from __future__ import annotations

import functools
from typing import Any

TEMPLATE_FILENAME = "<template>"
"""The file name Jinja gives a template compiled from a string: its frames in a traceback carry template lines."""


@functools.lru_cache(maxsize=64)
def _code_to_template_lines(template: Any) -> tuple[tuple[int, int], ...]:
    """``(template line, code line)`` pairs of a compiled template, last first (Jinja parses them on every ask)."""
    return tuple(reversed(template.debug_info))


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
            line = next((t for t, code in _code_to_template_lines(template) if code <= tb.tb_lineno), 1)
        elif frame.f_code.co_filename == TEMPLATE_FILENAME:  # a frame Jinja's rewrite made
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def one_line(exc: BaseException, limit: int = 200) -> str:
    """``Type: message``, with ``(template line N)`` when the template itself raised it."""
    text = " ".join(str(exc).split()) or "(no message)"
    line = template_line(exc)
    return f"{type(exc).__name__}: {text[:limit]}" + (f" (template line {line})" if line is not None else "")
