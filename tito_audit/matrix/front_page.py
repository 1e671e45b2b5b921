"""``reports/index.html``: the matrix as a front page.

A header with the verdict counts (a bar) and the families (a dot per model), the audited models grouped by
family with a text, verdict and family filter, the models not reachable here folded in a ``<details>``, and a
glossary the verdict and cause chips link to. Columns fit a laptop screen: long cells are clipped, with the
full text on hover (``title``) and on expanding (``<details>``). Every count is computed here from the rows
(the data of ``matrix.json``); the rows themselves are rendered in HTML, so the page reads without scripts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from tito_audit.audit.results import VERDICT_ORDER
from tito_audit.formatters.results_table import short_reason
from tito_audit.formatters.site.glossary import (
    CAUSES,
    IN_SHORT,
    NOT_AUDITED,
    VERDICTS,
    cause_chip,
    glossary,
    verdict_chip,
    verdict_class,
)
from tito_audit.formatters.site.html import attrs, document, esc
from tito_audit.matrix.row import (
    AUDITED,
    KEPT,
    NOT_REACHABLE,
    MatrixRow,
    cell,
    conditions_cell,
    verdict_of,
)
from tito_audit.parse import engines
from tito_audit.parse.interface import Engine

OTHER_FAMILY = "other"
DATA_FILES = ("matrix.md", "matrix.csv", "matrix.json", "matrix.parquet")
STEP_KINDS_SHOWN = (
    ("tool", "rollout_tool", "tool"),
    ("user", "rollout_user", "user"),
    ("system", "rollout_system", "sys"),
)
"""Step kinds shown: the kind, its matrix column, its column label."""
STEP_GLYPHS = {
    "stable": ("✓", "stable"),
    "unstable": ("✗", "unstable"),
    "refused": ("⊘", "refused"),
    "n/a": ("–", "na"),
}
ENGINE_WIDTH = 7.5
"""Per cent of the table's width each engine's column takes (the way-out column takes what is left)."""
PARSERS_PAGE = "parsers.html"
"""The page where the engines' parsers disagree (:mod:`tito_audit.matrix.disagreement_page`), beside this one."""
HARNESSES_PAGE = "harnesses.html"
"""The harness matrix (``tito-audit harnesses``): which agent harness keeps how much of what the model sampled."""


def columns() -> tuple[tuple[str, str], ...]:
    """The table's columns and their widths: a column per engine (:data:`~tito_audit.parse.engines.ENGINES`) after
    the perfect-inverse verdict's; ``when it breaks`` holds the conditions of every verdict worse than ready."""
    fixed = (("family", 7.0), ("model", 16.0), ("verdict", 8.5), ("level", 4.5), ("steps", 7.5))
    after = (("real data", 6.5), ("main causes", 10.5), ("when it breaks", 13.0))
    parsers = tuple((f"{engine.label} parser", ENGINE_WIDTH) for engine in engines.ENGINES)
    used = sum(width for _, width in (*fixed, *parsers, *after))
    return tuple((title, f"{width:g}%") for title, width in (*fixed, *parsers, *after, ("way out", 100 - used)))


def family_of(row: MatrixRow) -> str:
    return row.get("family") or OTHER_FAMILY


def page_link(row: MatrixRow) -> str | None:
    """The model page of a row (its pair's representative's page for a ``same_as`` row)."""
    report = row.get("report")
    return str(PurePosixPath(report).with_suffix(".html")) if report else None


def verdict_counts(rows: Sequence[MatrixRow]) -> dict[str, int]:
    """Audited rows per verdict, best first (every verdict listed, zero included)."""
    counted = Counter(verdict_of(row) for row in rows if row.get("status") == AUDITED)
    return {verdict: counted.get(verdict, 0) for verdict in VERDICT_ORDER}


def status_counts(rows: Sequence[MatrixRow]) -> dict[str, int]:
    """Rows not audited, per status (``not audited: not reachable`` …), in sorted order."""
    counted = Counter(row["status"] for row in rows if row.get("status") != AUDITED)
    return dict(sorted(counted.items()))


def families(rows: Sequence[MatrixRow]) -> dict[str, list[MatrixRow]]:
    """Rows by family, families in case-insensitive order (rows without one last, as ``other``)."""
    grouped: dict[str, list[MatrixRow]] = {}
    for row in rows:
        grouped.setdefault(family_of(row), []).append(row)
    return dict(sorted(grouped.items(), key=lambda kv: (kv[0] == OTHER_FAMILY, kv[0].casefold(), kv[0])))


def _dots(rows: Sequence[MatrixRow]) -> str:
    dots = []
    for row in rows:
        verdict = verdict_of(row)
        hollow = " hollow" if row.get("status") == NOT_REACHABLE else ""
        title = f"{row['model_id']}: {verdict}"
        dots.append(f'<i class="dot {verdict_class(verdict)}{hollow}" title="{esc(title)}"></i>')
    return f'<span class="dots" aria-hidden="true">{"".join(dots)}</span>'


def _verdict_chart(rows: Sequence[MatrixRow]) -> str:
    counts = verdict_counts(rows)
    audited = sum(counts.values())
    segments = "".join(
        f'<div class="seg {verdict_class(v)}" style="flex: {n} 1 0" title="{esc(v)}: {n} of {audited}">{n}</div>'
        for v, n in counts.items()
        if n
    )
    legend = "".join(
        f'<li><button type="button" data-pick-verdict="{esc(v)}" aria-pressed="false" data-count="{n}">'
        f'<span class="swatch {verdict_class(v)}"></span><span>{esc(v)}</span><span class="count">{n}</span>'
        f'<span class="what">{esc(IN_SHORT[v])}</span></button></li>'
        for v, n in counts.items()
    )
    others = status_counts(rows)
    note = "; ".join(
        f"{n} {esc(status.replace('not audited: ', ''))}"
        + (" (folded below the table)" if status == NOT_REACHABLE else " (in the table)")
        for status, n in others.items()
    )
    label = ", ".join(f"{n} {v}" for v, n in counts.items())
    return (
        f'<div class="card chart" id="verdicts" data-audited="{audited}"><h2>Verdicts of {audited} audited models</h2>'
        f'<div class="bar" role="img" aria-label="{esc(label)}">{segments}</div>'
        f'<ul class="legend">{legend}</ul>'
        + (f'<p class="note-line">Not audited here: {note}.</p>' if note else "")
        + "</div>"
    )


def _family_chart(grouped: dict[str, list[MatrixRow]]) -> str:
    items = []
    for family, members in grouped.items():
        audited = [r for r in members if r.get("status") != NOT_REACHABLE]
        counts = Counter(verdict_of(r) for r in members)
        title = f"{family}: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        inner = f'<span class="name">{esc(family)}</span>{_dots(members)}'
        if audited:
            items.append(
                f'<li><button type="button" data-pick-family="{esc(family)}" aria-pressed="false" title="{esc(title)}"'
                f' data-family-count="{len(members)}">{inner}</button></li>'
            )
        else:
            items.append(f'<li><button type="button" disabled title="{esc(title)}">{inner}</button></li>')
    return (
        f'<div class="card families" id="families"><h2>By family <span class="muted small">({len(grouped)} families;'
        f" a dot per model, hollow: not reachable here)</span></h2><ul>{''.join(items)}</ul></div>"
    )


def _steps(row: MatrixRow) -> str:
    cells = []
    for kind, column, _ in STEP_KINDS_SHOWN:
        status = str(cell(row, column) or "n/a")
        glyph, css = STEP_GLYPHS.get(status, ("?", "na"))
        label = esc(f"{kind} steps: {status}")
        cells.append(f'<span class="step {css}" title="{label}" aria-label="{label}">{glyph}</span>')
    return f'<div class="steps">{"".join(cells)}</div>'


def _engine_verdict(row: MatrixRow, engine: Engine) -> str:
    """The row's verdict with ``engine``'s documented parsers (the parsers and when it breaks on hover), or why
    there is none."""
    verdict = str(cell(row, f"{engine.name}_verdict") or "")
    parser = str(cell(row, f"{engine.name}_parser") or "none recorded")
    if verdict not in VERDICTS:
        return f'<span class="muted small" title="{esc(engine.label)}\'s parser: {esc(parser)}">–</span>'
    title = f"with {engine.label}'s parser {parser.removeprefix(engine.name + ' ')}: {verdict}"
    conditions = cell(row, f"{engine.name}_conditions") or ""
    title += f" — {conditions}" if conditions else ""
    way_out = cell(row, f"{engine.name}_way_out") or ""
    title += f"; way out: {way_out}" if way_out else ""
    return f'<span title="{esc(title)}">{verdict_chip(verdict)}</span>'


def _real_data(row: MatrixRow) -> str:
    value = row.get("verdict_with_real_data") or ""
    if not value:
        return '<span class="muted">–</span>'
    if value in VERDICTS:
        causes = row.get("real_data_causes") or ""
        title = f"with real trajectories: {value}" + (f" ({causes})" if causes else "")
        return f'<span title="{esc(title)}">{verdict_chip(value, link=None)}</span>'
    return f'<span class="muted small" title="{esc(value)}">{esc(value.split(" (")[0])}</span>'


def _level(row: MatrixRow) -> str:
    level = str(row.get("audit_level") or "")
    text = "text" if level == "text-level only" else "full"
    title = (
        "text level: audited from the chat template alone (no vocabulary here)"
        if text == "text"
        else "full: the real tokenizer" + level.removeprefix("full")
    )
    warn = ""
    if row.get("stop_tokens") == "unknown":
        warn = ' <span class="warn" title="stop tokens unknown">!</span>'
    return f'<span class="level" title="{esc(title)}">{text}</span>{warn}'


def _more(text: str, extra: str = "") -> str:
    """A clipped cell: the text on one line (ellipsis), all of it on hover and when expanded."""
    if not text:
        return ""
    return (
        f'<details class="more"><summary title="{esc(text)}">{esc(text)}</summary>'
        + (f'<div class="full">{extra}</div>' if extra else "")
        + "</details>"
    )


def _model_cell(row: MatrixRow) -> str:
    model = row["model_id"]
    org, _, name = model.rpartition("/")
    link = page_link(row)
    title = esc(model)
    cell = (
        f'<a class="name" href="{esc(link)}" title="{title}">{esc(name)}</a>'
        if link
        else f'<span class="name" title="{title}">{esc(name)}</span>'
    )
    cell += f'<span class="org">{esc(org)}</span>' if org else ""
    if row.get("same_as"):
        cell += f'<span class="alias" title="same template and tokenizer files">same as {esc(row["same_as"])}</span>'
    return cell


def _row(row: MatrixRow, lead: bool) -> str:
    verdict = verdict_of(row)
    causes = [c.strip() for c in (row.get("main_causes") or "").split(",") if c.strip()]
    if row.get("status") == AUDITED:
        chip = verdict_chip(verdict)
        fix = row.get("fix_report")
        extra = f'<a href="{esc(fix)}">way-out page</a>' if fix else ""
        kept = row.get("reason") or "" if (row.get("reason") or "").startswith(KEPT) else ""
        last = _more(" ".join(part for part in (kept, row.get("way_out") or "") if part), extra)
    else:
        chip = verdict_chip(NOT_AUDITED, label=row["status"].replace("not audited: ", ""))
        last = _more(row.get("reason") or "")
    search = " ".join([row["model_id"], family_of(row), verdict, *causes, row.get("way_out") or ""]).lower()
    cells = [
        f'<td class="fam"><span>{esc(family_of(row))}</span></td>',
        f'<td class="model">{_model_cell(row)}</td>',
        f"<td>{chip}</td>",
        f"<td>{_level(row) if row.get('status') == AUDITED else ''}</td>",
        f"<td>{_steps(row) if row.get('status') == AUDITED else ''}</td>",
        *(
            f"<td>{_engine_verdict(row, engine) if row.get('status') == AUDITED else ''}</td>"
            for engine in engines.ENGINES
        ),
        f"<td>{_real_data(row)}</td>",
        f'<td class="causes">{"".join(cause_chip(c) for c in causes)}</td>',
        f"<td>{_more(conditions_cell(row)) if row.get('status') == AUDITED else ''}</td>",
        f"<td>{last}</td>",
    ]
    row_attrs = attrs(
        class_="model lead" if lead else "model",
        data_model=row["model_id"],
        data_verdict=verdict,
        data_family=family_of(row),
        data_search=search,
    )
    return f"<tr{row_attrs}>{''.join(cells)}</tr>"


def _table(grouped: dict[str, list[MatrixRow]]) -> str:
    table_columns = columns()
    cols = "".join(f'<col style="width: {width}">' for _, width in table_columns)
    labels = "".join(f'<span title="{kind} steps">{label}</span>' for kind, _, label in STEP_KINDS_SHOWN)
    titles = {"steps": f'<div class="steps head">{labels}</div>'}
    head = "".join(f'<th scope="col">{titles.get(title, esc(title))}</th>' for title, _ in table_columns)
    bodies = []
    for family, members in grouped.items():
        shown = [r for r in members if r.get("status") == AUDITED] + [
            r for r in members if r.get("status") not in (AUDITED, NOT_REACHABLE)
        ]
        if not shown:
            continue
        rows = "".join(_row(r, i == 0) for i, r in enumerate(shown))
        bodies.append(f'<tbody data-family="{esc(family)}">{rows}</tbody>')
    return (
        f'<table class="matrix" id="matrix"><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead>'
        f"{''.join(bodies)}</table>"
    )


def _unreachable(rows: Sequence[MatrixRow]) -> str:
    missing = [r for r in rows if r.get("status") == NOT_REACHABLE]
    if not missing:
        return ""
    body = "".join(
        f'<tr class="model unreachable" data-model="{esc(r["model_id"])}"><td class="model">{esc(r["model_id"])}</td>'
        f'<td>{esc(family_of(r))}</td><td><span class="clip" title="{esc(r.get("reason", ""))}">'
        f"{esc(short_reason(r.get('reason', '')))}</span></td></tr>"
        for r in missing
    )
    return (
        f'<details class="section" id="unreachable"><summary>{len(missing)} registry models not audited here: '
        f"not reachable (no files in the mirrors or the cache; the Hub was not asked)</summary>"
        '<table class="matrix"><colgroup><col style="width: 32%"><col style="width: 14%"><col></colgroup>'
        '<thead><tr><th scope="col">model</th><th scope="col">family</th><th scope="col">reason</th></tr></thead>'
        f"<tbody>{body}</tbody></table></details>"
    )


def _controls(grouped: dict[str, list[MatrixRow]]) -> str:
    verdicts = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in (*VERDICT_ORDER, NOT_AUDITED))
    names = [f for f, members in grouped.items() if any(r.get("status") != NOT_REACHABLE for r in members)]
    options = "".join(f'<option value="{esc(f)}">{esc(f)}</option>' for f in names)
    return (
        '<div class="controls" role="search">'
        '<label>Find <input id="filter" type="search" placeholder="model, family, cause, fix…" '
        'autocomplete="off"></label>'
        f'<label>Verdict <select id="verdict"><option value="">all</option>{verdicts}</select></label>'
        f'<label>Family <select id="family"><option value="">all</option>{options}</select></label>'
        '<output id="shown" aria-live="polite"></output></div>'
    )


SCRIPT = """
(() => {
  const $ = (id) => document.getElementById(id);
  const rows = Array.from(document.querySelectorAll("#matrix tr.model"));
  const groups = Array.from(document.querySelectorAll("#matrix tbody"));
  const filter = $("filter"), verdict = $("verdict"), family = $("family"), shown = $("shown");
  function apply() {
    const text = filter.value.trim().toLowerCase();
    let count = 0;
    for (const row of rows) {
      const visible = (!verdict.value || row.dataset.verdict === verdict.value)
        && (!family.value || row.dataset.family === family.value)
        && (!text || row.dataset.search.includes(text));
      row.hidden = !visible;
      if (visible) count += 1;
    }
    for (const group of groups) {
      const visible = Array.from(group.querySelectorAll("tr.model:not([hidden])"));
      group.hidden = visible.length === 0;
      group.querySelectorAll("tr.model").forEach((row) => row.classList.toggle("lead", row === visible[0]));
    }
    shown.textContent = count + " of " + rows.length + " models shown";
    document.querySelectorAll("[data-pick-verdict]").forEach((b) =>
      b.setAttribute("aria-pressed", String(b.dataset.pickVerdict === verdict.value)));
    document.querySelectorAll("[data-pick-family]").forEach((b) =>
      b.setAttribute("aria-pressed", String(b.dataset.pickFamily === family.value)));
  }
  function pick(select, value) { select.value = select.value === value ? "" : value; apply(); }
  document.querySelectorAll("[data-pick-verdict]").forEach((b) =>
    b.addEventListener("click", () => pick(verdict, b.dataset.pickVerdict)));
  document.querySelectorAll("[data-pick-family]").forEach((b) =>
    b.addEventListener("click", () => pick(family, b.dataset.pickFamily)));
  filter.addEventListener("input", apply);
  verdict.addEventListener("change", apply);
  family.addEventListener("change", apply);
  apply();
})();
"""


LOOK_UP = (
    '<section id="look-up" class="card" aria-label="look up your model"><h2>Look up your model</h2>'
    '<form action="corpus/index.html" method="get" role="search"><label>Hub model id, template name or sha256 '
    '<input name="q" type="search" size="50" placeholder="Qwen/Qwen3-8B" autocomplete="off"></label> '
    '<button type="submit">Look up</button></form><p class="small muted">Searches the '
    '<a href="corpus/index.html">template corpus</a>: the chat templates in use on the Hugging Face Hub, each with '
    "the hub ids that ship it (a fine-tune usually ships its base model's template).</p></section>"
)
"""The form that sends a model id to the corpus's front page (``corpus/index.html?q=ID``), which finds its row."""


def front_page(rows: Sequence[MatrixRow], settings: dict[str, Any]) -> str:
    """The matrix's front page (self-contained; byte-identical for the same rows and settings)."""
    grouped = families(rows)
    audited = sum(1 for r in rows if r.get("status") == AUDITED)
    used = {c.strip() for r in rows for c in (r.get("main_causes") or "").split(",") if c.strip()}
    causes = [c for c in CAUSES if c in used] + sorted(used - set(CAUSES))
    lede = (
        "Which chat templates let an RL loop keep one token buffer and only append to it (token in, token out) as "
        "tool results and user turns come in. Each model links to its page: a picture of every break and the way out."
    )
    facts = (
        f"{audited} of {len(rows)} registry models audited · seed {settings.get('seed')} · "
        f"{settings.get('count')} generated conversations per variant · level “text”: the chat template alone, "
        "without the model's vocabulary"
    )
    downloads = " · ".join(f'<a href="{name}">{name}</a>' for name in DATA_FILES)
    body = (
        f'<header class="top"><div class="wrap"><h1>TITO compatibility matrix</h1><p class="lede">{esc(lede)}</p>'
        f'<p class="facts-line">{esc(facts)}</p>'
        f'<p class="facts-line">A verdict is given with each engine\'s documented parsers; engines parse differently: '
        f'<a href="{PARSERS_PAGE}" id="parsers-link">where the engines\' parsers disagree</a>. Agent harnesses as they '
        f'ship, behind the gateway: <a href="{HARNESSES_PAGE}" id="harnesses-link">the harness matrix</a>.</p>'
        "</div></header>"
        '<main class="wrap">'
        f'<section class="summary" aria-label="summary">{_verdict_chart(rows)}{_family_chart(grouped)}</section>'
        f"{LOOK_UP}"
        f'<section aria-label="models">{_controls(grouped)}{_table(grouped)}{_unreachable(rows)}</section>'
        '<section id="glossary" class="card"><h2>Verdicts and causes</h2>'
        f"{glossary(causes)}</section>"
        "</main>"
        f'<footer><div class="wrap">The same data: {downloads} · <a href="{PARSERS_PAGE}">{PARSERS_PAGE}</a> · '
        f'<a href="{HARNESSES_PAGE}">{HARNESSES_PAGE}</a> · '
        "produced by <code>tito-audit matrix</code>"
        "</div></footer>"
    )
    return document("TITO compatibility matrix", body, SCRIPT)
