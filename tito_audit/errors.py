"""Errors the command line turns into one clear line and a documented exit code."""

from __future__ import annotations

EXIT_OK = 0
"""The audit ran and the verdict is ``ready`` or ``ready-tool-only``."""
EXIT_VERDICT = 1
"""The audit ran and the verdict is worse (``broken`` or ``unsupported``)."""
EXIT_CANNOT_RUN = 2
"""The audit could not run: bad input, model not found, template missing."""


class AuditError(Exception):
    """An expected failure: the message is shown to the user as one line, exit code 2."""

    exit_code = EXIT_CANNOT_RUN


class ResolutionError(AuditError):
    """No source could provide the requested model."""


class ModelLoadError(AuditError):
    """A source was found but its tokenizer or template could not be loaded."""


class TemplateMissingError(AuditError):
    """The tokenizer has no chat template (or not the named one) and none was given."""


class BadInputError(AuditError):
    """An option or file given by the user is invalid."""
