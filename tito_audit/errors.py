"""Errors the command line turns into one clear line and a documented exit code."""

from __future__ import annotations

EXIT_OK = 0
"""The audit ran and the verdict is ``ready`` or ``ready-tool-only``."""
EXIT_VERDICT = 1
"""The audit ran and the verdict is worse (``broken`` or ``unsupported``)."""
EXIT_CANNOT_RUN = 2
"""The audit could not run: bad input, model not found, template missing, an output that cannot be written."""
EXIT_ROWS_FAILED = 3
"""``matrix``: the matrix was written, but some rows are ``not audited: audit error`` (an audit raised, or its
worker process died twice); run again to retry them."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C, SIGINT): what finished is kept (128 + SIGINT, as shells report it)."""


def one_line(message: BaseException | str, limit: int = 200, mark: str = "") -> str:
    r"""``message`` on one line: its whitespace runs made one space, cut to ``limit`` characters (the cut ending with
    ``mark``); an exception without a message is named by its type.

    >>> one_line("bad\n  value", limit=5)
    'bad v'
    >>> one_line(KeyError(), mark="...")
    'KeyError'
    """
    text = " ".join(str(message).split())
    if not text and isinstance(message, BaseException):
        text = type(message).__name__
    return text if len(text) <= limit else text[: limit - len(mark)] + mark


class AuditError(Exception):
    """An expected failure: the message is shown to the user as one line, exit code 2."""

    exit_code = EXIT_CANNOT_RUN


class ResolutionError(AuditError):
    """No source could provide the requested model."""


class ModelLoadError(AuditError):
    """A source was found but its tokenizer or template could not be loaded."""


class TemplateMissingError(AuditError):
    """The tokenizer has no chat template (or not the named one) and none was given."""


class TemplateTimeoutError(AuditError):
    """A render ran past the time limit (or made an output past the length limit): the template is refused for the
    rest of the audit."""


class BadInputError(AuditError, ValueError):
    """An option, file or value given by the user (or by a library caller) is invalid."""


class OutputError(AuditError):
    """An output file could not be written (the message names the option, the path and why)."""
