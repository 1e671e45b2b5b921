"""The lines of a model page that give the verdict with each engine's parser, beside the perfect-inverse verdict."""

from __future__ import annotations

from tito_audit.audit.results import AuditReport, EngineVerdict
from tito_audit.formatters.site.glossary import verdict_chip
from tito_audit.formatters.site.html import esc
from tito_audit.parse.engines import engine_named


def parser_line(report: AuditReport) -> str:
    """One line per engine audited (``With SGLang's parser qwen25+qwen3`` and its verdict), under the
    perfect-inverse verdict; nothing when only the perfect inverse ran."""
    return "".join(_engine_line(verdict) for verdict in report.parsers)


def _engine_line(verdict: EngineVerdict) -> str:
    engine = engine_named(verdict.engine) if verdict.engine else None
    who = f"With {engine.label}'s parser" if engine is not None else "With the parser"
    name = verdict.parser.removeprefix(f"{verdict.engine} ") if engine is not None else verdict.parser
    anchor = f"parser-verdict-{verdict.engine}" if verdict.engine else "parser-verdict"
    way_out = f'<span class="small"> Way out: {esc(verdict.way_out)}</span>' if verdict.way_out else ""
    return (
        f'<div class="parser-verdict" id="{esc(anchor)}" data-engine="{esc(verdict.engine)}"><strong>{esc(who)}'
        f"</strong> <code>{esc(name)}</code> {verdict_chip(verdict.verdict)} "
        f'<span class="muted small">{esc(verdict.why)}</span>{way_out}</div>'
    )
