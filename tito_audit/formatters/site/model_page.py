"""A model's page: the verdict and why at the top, then a picture of each break, the way out, and the check
tables folded below. Written by the matrix (``reports/models/<org>--<name>.html``) and by
``tito-audit audit MODEL --html FILE``; every number on it comes from the :class:`AuditReport` (and, for the way
out, the matrix's stored :class:`FixPage`), the data of the JSON report.
"""

from __future__ import annotations

from typing import Any

from tito_audit.audit.results import READY, UNSUPPORTED, AuditReport, Failure, VariantResult
from tito_audit.formatters.common import (
    drift_line,
    location,
    rewritten_message,
    side_labels,
    stop_tokens_line,
    tools_line,
    unrealizable_line,
)
from tito_audit.formatters.conditions_lines import variant_condition_lines
from tito_audit.formatters.fix_report import FixPage
from tito_audit.formatters.interface import FormatContext, ReportFormat
from tito_audit.formatters.parse_lines import beside_the_verdict, variant_parse_lines
from tito_audit.formatters.site import markdown_lite
from tito_audit.formatters.site.conditions_list import conditions_list
from tito_audit.formatters.site.examples import Example, examples
from tito_audit.formatters.site.glossary import VERDICTS, cause_chip, glossary, verdict_chip
from tito_audit.formatters.site.highlight import diff_html, source_lines
from tito_audit.formatters.site.html import document, esc
from tito_audit.formatters.site.links import PageLinks
from tito_audit.formatters.site.mask_line import mask_line
from tito_audit.formatters.site.parser_line import parser_line
from tito_audit.formatters.site.tokens import text_diff, token_diff

SIDE_NAMES = {"earlier": "buffer side", "later": "render side"}
ROW_LABELS = {
    "rollout": ("buffer as sampled", "template's next prompt"),
    "append": ("render before the append", "render after it"),
}
"""Short names of the two rows of a token diff (the README's longer ones, ``side_labels``, elsewhere)."""


def row_labels(failure: Failure) -> tuple[str, str]:
    if failure.aspect != "control-token" and failure.check in ROW_LABELS:
        return ROW_LABELS[failure.check]
    return side_labels(failure)


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")) if text else ""


def worst_reason(report: AuditReport) -> str:
    """The one-sentence reason of the model's verdict: its worst variant's (named when there are several)."""
    worst = next((v for v in report.variants if v.verdict == report.verdict), None)
    if worst is None:
        return ""
    if len(report.variants) == 1:
        return _sentence(worst.verdict_reason)
    where = "with the default settings" if worst.name == "default" else f"with {worst.name}"
    return _sentence(f"{where}: {worst.verdict_reason}")


def _header(report: AuditReport, links: PageLinks) -> str:
    model = report.model
    digest = model.template_sha256 or ""
    crumb = ""
    if links.index:
        crumb = f'<div class="crumb"><a href="{esc(links.index)}">← TITO compatibility matrix</a></div>'
    level = "text level: the template with a stand-in tokenizer" if report.text_level_only else "full: real tokenizer"
    files = [
        f'<a href="{esc(h)}">{label}</a>' for label, h in (("JSON", links.json), ("Markdown", links.markdown)) if h
    ]
    facts = [
        f"<span>audit <b>{esc(level)}</b></span>",
        f"<span>template <b>{esc(model.template_name or model.template_origin)}</b>"
        + (f' <code title="sha256 {esc(digest)}">{esc(digest[:12])}</code>' if digest else "")
        + "</span>",
        f"<span>seed <b>{report.settings.seed}</b> · <b>{report.settings.count}</b> conversations per variant · "
        f"at most <b>{report.settings.max_turns}</b> assistant turns</span>",
        f"<span>conversations <b>{esc(report.settings.conversations_source)}</b></span>",
        *([f"<span>tools <b>{esc(tools)}</b></span>"] if (tools := tools_line(report)) else []),
    ]
    if files:
        facts.append("<span>report " + " · ".join(files) + "</span>")
    return (
        f'<header class="top"><div class="wrap">{crumb}<h1>{esc(model.model_id)}</h1>'
        f'<div class="meta">{"".join(facts)}</div></div></header>'
    )


def _variant_chip(variant: VariantResult) -> str:
    return (
        f'<span class="variant-chip" title="{esc(variant.verdict_reason)}" data-variant="{esc(variant.name)}">'
        f"<code>{esc(variant.name)}</code>{verdict_chip(variant.verdict)}</span>"
    )


def _way_out_line(report: AuditReport, way_out: FixPage | None) -> str:
    if way_out is not None:
        return (
            f'<div class="wayout"><strong>Way out:</strong>{esc(way_out.summary)} '
            f'<a href="#way-out">details ↓</a></div>'
        )
    if report.recommendation is not None:
        return f'<div class="wayout"><strong>Way out:</strong>{esc(report.recommendation.line())}</div>'
    return ""


def _verdict(report: AuditReport, way_out: FixPage | None) -> str:
    variants = "".join(_variant_chip(v) for v in report.variants) if len(report.variants) > 1 else ""
    return (
        '<section class="card verdict-card" aria-label="verdict">'
        f'<div id="verdict">{verdict_chip(report.verdict, big=True)}</div>'
        f'<p class="reason" id="reason">{esc(worst_reason(report))}</p>'
        + parser_line(report)
        + conditions_list(report)
        + mask_line(report)
        + (f'<div class="variants" aria-label="verdict per variant">{variants}</div>' if variants else "")
        + _way_out_line(report, way_out)
        + "</section>"
    )


LINE_LIMIT = 240
"""Characters of a template line shown (a template written on one line is not quoted whole)."""


def _clipped(text: str) -> str:
    return text if len(text) <= LINE_LIMIT else f"{text[:LINE_LIMIT]} …"


def _template_lines(explanation: dict[str, Any]) -> str:
    sides = [s for s in explanation.get("sides", []) if isinstance(s, dict)]
    numbers = [{line.get("number") for line in s.get("lines", []) if isinstance(line, dict)} for s in sides]
    blocks = []
    for i, side in enumerate(sides):
        others = set().union(*(n for j, n in enumerate(numbers) if j != i)) if len(numbers) > 1 else set()
        lines = [
            (int(line["number"]), _clipped(str(line.get("text", ""))), line["number"] not in others)
            for line in side.get("lines", [])
            if isinstance(line, dict) and isinstance(line.get("number"), int)
        ]
        reads = sorted({str(r) for line in side.get("lines", []) for r in line.get("reads", []) if "." in str(r)})
        name = SIDE_NAMES.get(str(side.get("side")), str(side.get("side")))
        title = f"{esc(name)}: <code>{esc(side.get('render', ''))}</code>"
        body = source_lines(lines) if lines else '<p class="muted small">no template line attributed</p>'
        if reads:
            body += f'<div class="reads">reads {esc(", ".join(reads[:8]))}</div>'
        blocks.append(f"<div><h4>{title}</h4>{body}</div>")
    note = explanation.get("note")
    if note:
        blocks.append(f'<p class="muted small">{esc(note)}</p>')
    if not blocks:
        return ""
    return (
        '<h3>Template lines behind it</h3><p class="muted small">Lines found on one side only are highlighted.</p>'
        f'<div class="lines">{"".join(blocks)}</div>'
    )


def _confirmations(explanation: dict[str, Any]) -> str:
    items = []
    for confirmation in explanation.get("confirmations", []):
        if not isinstance(confirmation, dict):
            continue
        ok = bool(confirmation.get("confirmed"))
        items.append(
            f'<li><span class="{"yes" if ok else "no"}">{"✓" if ok else "✗"}</span> '
            f"{cause_chip(str(confirmation.get('cause', '')))} {esc(confirmation.get('evidence', ''))}</li>"
        )
    return f'<ul class="confirm" aria-label="each cause checked on this case">{"".join(items)}</ul>' if items else ""


def _example(example: Example, specials: list[str], number: int) -> str:
    failure = example.failure
    labels = row_labels(failure)
    chips = " ".join(cause_chip(c) for c in example.causes)
    counted = ", ".join(f"{c} ×{example.counts[c]}" for c in example.causes if example.counts.get(c))
    counted = f"failing {failure.check} cases of this variant: {counted}" if counted else ""
    changed = rewritten_message(failure) or f"at {location(failure)}"
    where = (
        f"variant <code>{esc(example.variant)}</code> · {esc(failure.check)} / {esc(failure.category)} · "
        f"{esc(location(failure))}"
    )
    parts = [
        f'<article class="card example" id="example-{number}" data-causes="{esc(" ".join(example.causes))}">',
        f'<div class="example-head"><div>{chips}</div><div class="where">{where}</div></div>',
        f'<p class="changed"><strong>{esc(_sentence(changed))}</strong>'
        + (f' <span class="muted small">({esc(counted)})</span>' if counted else "")
        + "</p>",
    ]
    if failure.detail:
        parts.append(f'<p class="muted small">{esc(failure.detail)}</p>')
    parts.append(token_diff(failure, labels, specials))
    parts.append(text_diff(failure, labels))
    if example.explanation is not None:
        parts.append(_template_lines(example.explanation))
        parts.append(_confirmations(example.explanation))
    parts.append("</article>")
    return "".join(parts)


DECIDES_THE_VERDICT = "rollout"
"""The check whose failures decide the verdict; message-level appends, round trips and the bridge are reported
beside it, never folded into it (docs/audited.md, "Verdicts")."""
LEGEND = (
    "The first differing token is outlined; <code>·</code> is a space, <code>⏎</code> a newline, special tokens "
    "are tinted; hover a token for its position and id."
)


def _breaks(report: AuditReport, compact: bool = False) -> str:
    """The examples of the causes behind the verdict (rollout steps), then those reported beside it (``compact``:
    named in one line each, without their token diffs)."""
    found = examples(report)
    specials = sorted({s.text for v in report.variants for s in v.stop_tokens})
    numbered = list(enumerate(found, start=1))
    breaking = [(n, e) for n, e in numbered if e.failure.check == DECIDES_THE_VERDICT]
    beside = [(n, e) for n, e in numbered if e.failure.check != DECIDES_THE_VERDICT]
    if breaking:
        intro = (
            "The first example of each cause at a rollout step. Top row: the token buffer as the model sampled it; "
            f"bottom row: the template's next prompt. {LEGEND}"
        )
        cards = "".join(_example(e, specials, n) for n, e in breaking)
        parts = [f'<section id="breaks"><h2>What breaks</h2><p class="muted small">{intro}</p>{cards}</section>']
    elif report.verdict == READY:
        parts = [
            '<section id="breaks"><h2>What breaks</h2><p class="card ok"><strong>Nothing.</strong> Every appended '
            "step of every variant is text- and seam-stable, so one append-only token buffer follows this template."
            "</p></section>"
        ]
    else:
        parts = []
    if beside and compact:
        items = "".join(
            f"<li>{''.join(cause_chip(c) for c in e.causes)} {esc(location(e.failure))}</li>" for _, e in beside
        )
        parts.append(
            '<section id="beside"><h2>Beside the verdict</h2><p class="muted small">Message-level appends, round '
            "trips, the bridge and the training mask: reported, never folded into the verdict (first example of each; "
            f"<code>tito-audit audit</code> draws them).</p><ul>{items}</ul></section>"
        )
    elif beside:
        intro = (
            "Message-level appends (the render before and after one message is appended), round trips, the "
            f"bridge and the training mask: reported, never folded into the verdict. {LEGEND}"
        )
        cards = "".join(_example(e, specials, n) for n, e in beside)
        parts.append(
            f'<section id="beside"><h2>Beside the verdict</h2><p class="muted small">{intro}</p>{cards}</section>'
        )
    return "".join(parts)


def _refusals(report: AuditReport) -> str:
    """For a variant that is ``unsupported``: what its template refused, and the retry that was accepted."""
    rows = []
    for variant in report.variants:
        if variant.verdict != UNSUPPORTED:
            continue
        for refused in variant.refused:
            after = ", ".join(refused.accepted_after) if refused.accepted_after else "no shape accepted"
            rows.append(
                f"<tr><td><code>{esc(variant.name)}</code></td><td>{esc(refused.reason)}</td>"
                f"<td class=num>{refused.count}</td><td>{esc(after)}</td></tr>"
            )
    if not rows:
        return ""
    return (
        '<section id="refused" class="card"><h2>What the template refuses</h2><p class="muted small">Conversations '
        "the template raised for or rendered unfaithfully (tool calls or results dropped), and the shape in which "
        'it accepted them, if any.</p><div class="table-wrap"><table class="plain"><thead><tr><th>variant</th>'
        "<th>reason</th><th class=num>conversations</th><th>accepted after</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _fix(report: AuditReport, way_out: FixPage | None, links: PageLinks) -> str:
    if way_out is None:
        return ""
    parts = [f'<section id="way-out" class="card"><h2>Way out: {esc(way_out.summary)}</h2>']
    if way_out.setting is not None:
        parts.append(f"<h3>Setting</h3><p>{esc(way_out.setting)}</p>")
    parts.append(markdown_lite.to_html([*way_out.fix_lines, *way_out.training_lines], heading_level=3))
    if way_out.diff is not None:
        parts.append("<h3>The diff</h3>" + diff_html(way_out.diff))
    elif way_out.fix_offered:
        parts.append(
            '<p class="muted">The diff is not published (the template has long lines); '
            f"<code>tito-audit patch {esc(report.model.model_id)} -o FILE</code> writes it.</p>"
        )
    files = [f'<a href="{esc(h)}">{t}</a>' for t, h in (("way-out page", links.fix), ("diff", links.diff)) if h]
    if files:
        parts.append(f'<p class="small muted">Files: {" · ".join(files)}</p>')
    parts.append("</section>")
    return "".join(parts)


def _check_table(variant: VariantResult) -> str:
    rows = []
    for name, check in variant.checks.items():
        for row in check.rows:
            rows.append(
                f'<tr data-check="{esc(name)}" data-category="{esc(row.category)}"><td>{esc(name)}</td>'
                f"<td>{esc(row.category)}</td><td class=num>{row.cases}</td><td class=num>{row.passed}</td>"
                f'<td class="num{" bad" if row.failed else ""}">{row.failed}</td><td class=num>{row.refused}</td></tr>'
            )
    head = "<tr><th>check</th><th>category</th>" + "".join(
        f"<th class=num>{h}</th>" for h in ("cases", "passed", "failed", "refused")
    )
    return (
        f'<div class="table-wrap"><table class="plain checks"><thead>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _variant_details(variant: VariantResult) -> str:
    facts = [
        f"Conversations audited: {variant.conversations_audited} of {variant.conversations}; "
        f"assistant turns audited: {variant.assistant_turns}."
    ]
    for name, check in variant.checks.items():
        if check.cause_counts:
            facts.append(f"{name} causes: " + ", ".join(f"{c} ×{n}" for c, n in sorted(check.cause_counts.items())))
    facts += variant_condition_lines(variant)
    facts += variant_parse_lines(variant)
    facts += beside_the_verdict(variant)
    facts.append(f"Re-render drift: {drift_line(variant)}.")
    facts.append("Stop tokens: " + stop_tokens_line(variant))
    facts += [f"Finding {f.cause}: {f.summary}" + (f" ({f.evidence})" if f.evidence else "") for f in variant.findings]
    for refused in variant.refused:
        after = ", ".join(refused.accepted_after) if refused.accepted_after else "no shape accepted"
        facts.append(
            f"Refused ×{refused.count}: {refused.reason}; retried as: {after} (e.g. {refused.example_conversation})"
        )
    facts += [unrealizable_line(group) for group in variant.unrealizable]
    facts += [f"{f.kind} steps after {f.form}: {f.failed} of {f.steps} fail" for f in variant.steps_by_form]
    facts += [f"Note ({name}): {note}" for name, check in variant.checks.items() for note in check.notes]
    items = "".join(f"<li>{esc(fact)}</li>" for fact in facts)
    return (
        f'<details class="section card" data-variant="{esc(variant.name)}">'
        f"<summary>Variant <code>{esc(variant.name)}</code> "
        f'{verdict_chip(variant.verdict)} <span class="muted small">{esc(variant.verdict_reason)}</span></summary>'
        f'{_check_table(variant)}<ul class="facts">{items}</ul></details>'
    )


def _details(report: AuditReport) -> str:
    parts = ['<section id="checks"><h2>Check tables</h2>']
    if report.notes:
        parts.append('<ul class="facts">' + "".join(f"<li>{esc(n)}</li>" for n in report.notes) + "</ul>")
    if report.template_inputs:
        found = ", ".join(
            f"{k}" + (f" ({', '.join(map(str, v))})" if v else "") for k, v in report.template_inputs.items()
        )
        parts.append(f'<p class="small muted">Template keyword arguments found: {esc(found)}</p>')
    parts += [_variant_details(v) for v in report.variants]
    parts.append("</section>")
    return "".join(parts)


def _footer(report: AuditReport) -> str:
    model = report.model
    libraries = ", ".join(f"{k} {v}" for k, v in report.library_versions.items())
    return (
        f'<footer><div class="wrap">tito-audit {esc(report.tool_version)} · {esc(libraries)} · source '
        f"{esc(model.source)} ({esc(model.path)}) · backend {esc(model.backend)} ({esc(model.tokenizer_class)})"
        "</div></footer>"
    )


def _listed(value: object) -> list[object]:
    """A list field of an explanation (a document of the report's JSON), or nothing when it is not a list."""
    return value if isinstance(value, list) else []


def model_page(
    report: AuditReport, way_out: FixPage | None = None, links: PageLinks = PageLinks(), compact: bool = False
) -> str:
    """The HTML page of one audited model (self-contained; byte-identical for the same data). ``compact`` (the
    corpus's pages): the breaks beside the verdict named without their token diffs."""
    causes = [c for e in examples(report) for c in e.causes]
    causes += [
        str(c.get("cause"))
        for e in report.explanations
        for c in _listed(e.get("confirmations", []))
        if isinstance(c, dict)
    ]
    verdicts = [v for v in VERDICTS if v in {report.verdict, *(x.verdict for x in report.variants)}]
    body = (
        _header(report, links)
        + '<main class="wrap">'
        + _verdict(report, way_out)
        + _refusals(report)
        + _breaks(report, compact)
        + _fix(report, way_out, links)
        + _details(report)
        + f'<section id="glossary"><h2>Glossary</h2>{glossary(causes, verdicts)}</section>'
        + "</main>"
        + _footer(report)
    )
    return document(f"{report.model.model_id}: {report.verdict} — tito-audit", body)


class HtmlFormat(ReportFormat):
    name = "html"
    help = "Write the model's page here (self-contained HTML: verdict, token diffs)."

    def render(self, report: AuditReport, context: FormatContext) -> str:
        return model_page(report)
