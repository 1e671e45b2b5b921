"""What a template raised, in one line with the template line it was raised at.

Jinja compiles a template into Python code whose frames carry the file name ``<template>``; its own ``render``
rewrites a traceback so that those frames carry template lines, a direct call of the compiled code does not (the
direct renderer maps the line itself and hands it over in :class:`TemplateRaised`).
"""

from __future__ import annotations

TEMPLATE_FILENAME = "<template>"
"""The file name Jinja gives a template compiled from a string: its frames in a traceback carry template lines."""


def template_line(exc: BaseException) -> int | None:
    """The template line an exception was raised at (the innermost template frame of its traceback), if any."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == TEMPLATE_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


class TemplateRaised(Exception):
    """An exception the template raised in a direct render, with the template line it was raised at."""

    def __init__(self, error: Exception, line: int | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.line = line


def one_line(exc: BaseException, limit: int = 200, line: int | None = None) -> str:
    """``Type: message``, with ``(template line N)`` when the template itself raised it (``line`` when the caller
    knows it, else read from the traceback Jinja rewrote)."""
    text = " ".join(str(exc).split()) or "(no message)"
    line = line if line is not None else template_line(exc)
    return f"{type(exc).__name__}: {text[:limit]}" + (f" (template line {line})" if line is not None else "")
