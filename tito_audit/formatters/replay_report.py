"""Replay report: terminal, JSON and Markdown."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tito_audit.formatters.common import visible, window_tokens
from tito_audit.outputs import write_atomically
from tito_audit.session.rollout_replay import ReplayReport, TurnIssue


def _summary(report: ReplayReport) -> list[str]:
    mismatched = sum(r.rerender_mismatched for r in report.results)
    total = sum(r.rerender_total for r in report.results)
    foreign = [r.record for r in report.results if not r.own_prompts]
    lines = [
        f"records: {report.records} ({sum(report.skipped.values())} skipped), turns: {report.turns}",
        f"consistent records (only appended, each prompt the render of their own messages): "
        f"{report.consistent_records} of {len(report.results)}",
    ]
    if foreign:
        shown = ", ".join(str(n) for n in foreign[:10]) + (", ..." if len(foreign) > 10 else "")
        lines.append(f"records whose saved prompts are not the render of their own messages: record {shown}")
    lines.append("issues: " + (", ".join(f"{k} ×{n}" for k, n in _kinds(report.issues).items()) or "none"))
    lines.append(f"a re-rendering trainer would differ at {mismatched} of {total} buffer positions")
    return lines


def _kinds(issues: list[TurnIssue]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for issue in issues:
        counts[issue.kind] = counts.get(issue.kind, 0) + 1
    return dict(sorted(counts.items()))


def render_replay(report: ReplayReport, console: Console, limit: int = 10) -> None:
    status = Text("consistent", style="bold green") if report.consistent else Text("inconsistent", style="bold red")
    console.print(Text.assemble("replay of ", report.source, " with ", report.model_id, ": ", status))
    for line in _summary(report):
        console.print(line, highlight=False)
    for reason, count in report.skipped.items():
        console.print(f"skipped ×{count}: {reason}", style="magenta", highlight=False)
    if report.issues:
        table = Table(header_style="bold")
        for column in ("record", "turn", "issue", "token", "expected", "actual"):
            table.add_column(column, overflow="fold")
        for issue in report.issues[:limit]:
            table.add_row(
                str(issue.record),
                str(issue.turn),
                issue.kind,
                str(issue.token_index),
                "│".join(window_tokens(issue.expected)),
                "│".join(window_tokens(issue.actual)),
            )
        console.print(table)


def to_json(report: ReplayReport) -> str:
    document = dataclasses.asdict(report)
    document["consistent"] = report.consistent
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def to_markdown(report: ReplayReport) -> str:
    lines = [f"# tito-audit replay: {report.source} with {report.model_id}", ""]
    lines += [f"- {line}" for line in _summary(report)]
    lines += [f"- skipped ×{n}: {reason}" for reason, n in report.skipped.items()]
    if report.issues:
        lines += ["", "| record | turn | issue | token | expected | actual |", "|---:|---:|---|---:|---|---|"]
        for issue in report.issues:
            expected = visible(" | ".join(window_tokens(issue.expected))).replace("|", "\\|")
            actual = visible(" | ".join(window_tokens(issue.actual))).replace("|", "\\|")
            lines.append(
                f"| {issue.record} | {issue.turn} | {issue.kind} | {issue.token_index} | `{expected}` | `{actual}` |"
            )
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    """``text`` written to ``path`` atomically."""
    write_atomically(path, text)
