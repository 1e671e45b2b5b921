"""The commands a report suggests (``tito-audit patch MODEL … -o FILE``), written to run as printed: the model named
as the user named it, followed by the options that found it and shaped its audit (``--mirror``, ``--no-hub``,
``--template``, ``--kwarg``, ``--parser``, …). The command line hands them over as ``model_words``; a report made
elsewhere (the published matrix, the library) names the model by its id alone, as a reader on the Hub would.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from tito_audit.audit.results import BROKEN, READY_TOOL_ONLY, AuditReport

PATCH_OUTPUT = "-o FILE"
"""The placeholder of ``patch``'s output file in a suggestion (the one word a user replaces)."""


def model_words_of(report: AuditReport, model_words: Sequence[str] | None) -> list[str]:
    """``model_words`` as given, else the report's model id."""
    return list(model_words) if model_words else [report.model.model_id]


def suggested(command: str, report: AuditReport, model_words: Sequence[str] | None, *placeholders: str) -> str:
    """``tito-audit COMMAND MODEL OPTIONS… PLACEHOLDERS…``, each word quoted for a POSIX shell where it needs it
    (placeholders such as ``-o FILE`` are left as they are)."""
    words = shlex.join(["tito-audit", command, *model_words_of(report, model_words)])
    return " ".join([words, *placeholders])


def next_commands(
    report: AuditReport, model_words: Sequence[str] | None = None, fix_offered: bool | None = None
) -> list[tuple[str, str]]:
    """What to run next, as (what it gives, the command): the template lines behind each cause when something
    failed, and the search for a verified fix when the verdict is ``broken`` or ``ready-tool-only`` and no setting
    suffices (``fix_offered``: False when a search already found none; never for a model rendered without a Jinja
    template, which has none to fix). Print each command on a line of its own,
    unwrapped (a terminal wraps it for the eye; a copy gives it whole)."""
    lines = []
    if report.explanations:
        lines.append(("the template lines behind each cause", suggested("explain", report, model_words)))
    recommendation = report.recommendation
    suffices = recommendation is not None and recommendation.suffices
    fixable = report.model.template_sha256 is not None and fix_offered is not False
    if report.verdict in (BROKEN, READY_TOOL_ONLY) and not suffices and fixable:
        lines.append(("a verified fix", suggested("patch", report, model_words, PATCH_OUTPUT)))
    return lines
