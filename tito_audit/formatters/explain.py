"""Terminal output of ``tito-audit explain``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from tito_audit.audit.results import AuditReport, EngineVerdict, plain
from tito_audit.formatters.common import location, rewritten_message, visible
from tito_audit.formatters.terminal import token_diff, verdict_text
from tito_audit.outputs import write_atomically
from tito_audit.parse.engines import engine_words
from tito_audit.repair.explain import ExplainReport, Explanation


def render_explanations(
    report: AuditReport,
    explanations: list[Explanation],
    causes: dict[str, list[int]],
    cases: int,
    console: Console,
    full: bool = False,
) -> None:
    headline = Text.assemble(f"{report.model.model_id}: ", verdict_text(report.verdict), f" — {cases} failing cases")
    for engine_verdict in report.parsers:
        who = engine_words(engine_verdict.engine, engine_verdict.parser)
        headline.append_text(Text.assemble(f"; with {who}: ", verdict_text(engine_verdict.verdict)))
    console.print(headline)
    for cause, numbers in sorted(causes.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(str(n) for n in numbers[:8]) + (" …" if len(numbers) > 8 else "")
        console.print(f"  {cause}: {len(numbers)} cases ({shown})", highlight=False)
    for explanation in explanations:
        failure = explanation.failure
        parts: list = [
            Text(
                f"{failure.check}/{failure.aspect} at {location(failure)}; variant {explanation.variant}", style="bold"
            ),
        ]
        if rewritten_message(failure):
            parts.append(Text(rewritten_message(failure), style="bold yellow"))
        if explanation.byte_offset is not None:
            parts.append(
                Text(f"first differing token at byte {explanation.byte_offset} of the earlier side", style="dim")
            )
        for side in explanation.sides:
            parts.append(Text(f"{side.side}: {side.render}, character {side.char_index}: …{visible(side.excerpt)}…"))
            for line in side.lines:
                reads = f"   reads {', '.join(line.reads)}" if line.reads else ""
                parts.append(Syntax(line.text, "jinja", line_numbers=True, start_line=line.number, word_wrap=True))
                if reads:
                    parts.append(Text(reads, style="cyan"))
            if not side.lines:
                parts.append(Text("  (no template line could be attributed)", style="dim"))
        for confirmation in explanation.confirmations:
            mark = ("✓", "green") if confirmation.confirmed else ("✗", "red")
            parts.append(Text.assemble((f"{mark[0]} {confirmation.cause}: ", mark[1]), confirmation.evidence))
        if explanation.note:
            parts.append(Text(explanation.note, style="yellow"))
        if full:
            parts.append(token_diff(failure))
        title = f"case {explanation.case}: " + ", ".join(failure.causes)
        console.print(Panel(Group(*parts), title=title, title_align="left"))


def to_json(explained: ExplainReport, verdict: str, parsers: Sequence[EngineVerdict] = ()) -> str:
    """The explanations as JSON: the model, its verdict (and the verdict with each engine's parser audited: engine,
    parser, verdict), the cases per cause and each explanation in full."""
    document = {
        "model_id": explained.model_id,
        "template_sha256": explained.template_sha256,
        "verdict": verdict,
        "parsers": [{"engine": p.engine, "parser": p.parser, "verdict": p.verdict} for p in parsers],
        "cases": explained.cases,
        "causes": explained.causes,
        "explanations": [plain(e) for e in explained.explanations],
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def write_json(explained: ExplainReport, verdict: str, path: Path, parsers: Sequence[EngineVerdict] = ()) -> None:
    """:func:`to_json` written to ``path`` atomically."""
    write_atomically(path, to_json(explained, verdict, parsers))
