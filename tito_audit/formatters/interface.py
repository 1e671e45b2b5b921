"""The interface every format of an audit report implements, and what a format is given besides the report.

A format turns one :class:`~tito_audit.audit.results.AuditReport` into the text of one file. Each format lives in a
module of its own (:mod:`.json_report`, :mod:`.markdown`, :mod:`.site.model_page`) and is named once in
:data:`tito_audit.formatters.registry.REPORT_FORMATS`; the command line's ``--NAME FILE`` options (``audit``'s, and
``check``'s pages) are read from that registry, so a new format is its module and its name there.

The terminal view (:mod:`.terminal`) is not a format: it prints to a console as the audit ends, with colour and
width, and writes no file.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tito_audit.audit.results import AuditReport


@dataclass(frozen=True)
class FormatContext:
    """What a format may use besides the report (each format reads what it needs and ignores the rest)."""

    model_words: Sequence[str] | None = None
    """The model and options as the command line named them, for the commands a report suggests next
    (:mod:`tito_audit.formatters.commands`); None: the report's own model id."""


class ReportFormat(ABC):
    """One format of an audit report: its name (the option ``--NAME FILE`` writes it), the option's help, and the
    text of the file."""

    name: ClassVar[str]
    """The format's name: the command line's option is ``--`` and this name."""
    help: ClassVar[str]
    """The option's help: what the file holds."""

    @property
    def option(self) -> str:
        return f"--{self.name}"

    @abstractmethod
    def render(self, report: AuditReport, context: FormatContext) -> str:
        """The whole file's text for ``report`` (deterministic: the same report, the same text)."""
