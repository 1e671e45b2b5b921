"""``<out>/index.html`` of a corpus matrix: "look up your model", the verdict shares (by template and weighted by
downloads), refusals by reason, and every template in a table (sorted by downloads, most first).

The search reads ``lookup.js`` (every hub id that ships a template, the templates' names and sha256) with a
``<script src>``, so it works from a clone opened as files; the table below it reads without scripts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from tito_audit.audit.results import VERDICT_ORDER
from tito_audit.formatters.site.glossary import NOT_AUDITED, verdict_chip
from tito_audit.formatters.site.html import document, esc
from tito_audit.matrix.corpus_publish import CorpusRow
from tito_audit.matrix.row import AUDITED, cell, verdict_of
from tito_audit.parse import engines

SCRIPT = """
const box = document.getElementById('lookup');
const out = document.getElementById('found');
function show(text) {
  const q = text.trim().toLowerCase();
  out.replaceChildren();
  if (!q || !window.CORPUS) return;
  const hit = window.CORPUS.ids[q];
  if (hit === undefined) {
    const p = document.createElement('p');
    p.textContent = 'No template of the corpus is shipped by ' + text.trim() + ' (ids are matched exactly).';
    out.append(p);
    return;
  }
  const [name, repo, verdict, level, causes, wayOut, page, downloads, ids, parser] = window.CORPUS.rows[hit];
  const p = document.createElement('p');
  const a = document.createElement(page ? 'a' : 'span');
  if (page) a.href = page;
  a.textContent = name;
  const b = document.createElement('strong');
  b.textContent = verdict;
  p.append('Template ', a, ' (' + repo + ', shipped by ' + ids + ' hub ids): ', b,
    level ? ' (' + level + ' level)' : '', parser ? '; ' + parser : '',
    causes ? '. ' + causes : '', wayOut ? '. Way out: ' + wayOut : '');
  out.append(p);
}
box.addEventListener('input', () => show(box.value));
const q = new URLSearchParams(location.search).get('q');
if (q) { box.value = q; show(q); }
"""


def shares(rows: Sequence[CorpusRow]) -> list[tuple[str, int, int]]:
    """Per verdict (best first, then not audited): templates and the downloads of their repos."""
    templates: Counter[str] = Counter()
    downloads: Counter[str] = Counter()
    for row in rows:
        templates[verdict_of(row)] += 1
        downloads[verdict_of(row)] += row.get("downloads") or 0
    return [(verdict, templates[verdict], downloads[verdict]) for verdict in (*VERDICT_ORDER, NOT_AUDITED)]


def refusals(rows: Sequence[CorpusRow]) -> list[tuple[str, int]]:
    """Rows not audited per status, and unsupported rows per refusal reason (first words), most first."""
    counted: Counter[str] = Counter()
    for row in rows:
        if row.get("status") != AUDITED:
            counted[row["status"]] += 1
        elif row.get("verdict") == "unsupported" and row.get("refused"):
            counted["unsupported: " + row["refused"].split(":", 1)[0]] += 1
    return sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "–"


def _summary(rows: Sequence[CorpusRow]) -> str:
    counted = shares(rows)
    total_downloads = sum(d for _, _, d in counted)
    ready = sum(d for verdict, _, d in counted if verdict == "ready")
    tool_only = sum(d for verdict, _, d in counted if verdict == "ready-tool-only")
    items = "".join(
        f"<tr><td>{verdict_chip(verdict)}</td><td>{count}</td><td>{_percent(count, len(rows))}</td>"
        f"<td>{_percent(downloads, total_downloads)}</td></tr>"
        for verdict, count, downloads in counted
        if count
    )
    return (
        f"<p><strong>{_percent(ready, total_downloads)} of downloads are ready</strong> to keep one token buffer, "
        f"{_percent(tool_only, total_downloads)} more for tool results only. Downloads are the hub downloads of "
        "each template's repo when the corpus was collected (llama.cpp's own templates count 0).</p>"
        '<table class="shares"><thead><tr><th>verdict</th><th>templates</th><th>share</th>'
        f"<th>share of downloads</th></tr></thead><tbody>{items}</tbody></table>"
    )


def _refusal_list(rows: Sequence[CorpusRow]) -> str:
    items = "".join(f"<li>{count}× {esc(reason)}</li>" for reason, count in refusals(rows))
    return f"<details><summary>Refusals and rows not audited, by reason</summary><ul>{items}</ul></details>"


def _table(rows: Sequence[CorpusRow]) -> str:
    shown = [engine for engine in engines.ENGINES if any(cell(row, f"{engine.name}_verdict") for row in rows)]
    body = []
    for row in sorted(rows, key=lambda r: (-(r.get("downloads") or 0), r["name"].lower())):
        name = esc(row["name"])
        link = f'<a href="{esc(row["page"])}">{name}</a>' if row.get("page") else name
        why = row.get("main_causes") or row.get("refused") or row.get("reason") or ""
        with_parsers = "".join(_engine_cell(str(cell(row, f"{engine.name}_verdict") or "")) for engine in shown)
        body.append(
            f"<tr><td>{link}<br><small>{esc(row.get('repo') or '')}</small></td><td>{row.get('downloads') or 0}</td>"
            f"<td>{row.get('model_ids') or 0}</td><td>{verdict_chip(verdict_of(row))}</td>{with_parsers}"
            f"<td>{esc(row.get('level') or '')}</td><td>{esc(why[:160])}</td>"
            f"<td>{esc((row.get('way_out') or '')[:160])}</td></tr>"
        )
    parser_heads = "".join(f"<th>with {esc(engine.label)}'s parser</th>" for engine in shown)
    return (
        '<table class="corpus"><thead><tr><th>template (repo)</th><th>downloads</th><th>hub ids</th><th>verdict</th>'
        f"{parser_heads}<th>level</th><th>main causes / refusal</th><th>way out</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _engine_cell(verdict: str) -> str:
    """A verdict with an engine's parsers, or a dash where the row has none."""
    return f"<td>{verdict_chip(verdict)}</td>" if verdict else '<td class="muted">–</td>'


def corpus_front_page(rows: Sequence[CorpusRow], settings: dict[str, Any]) -> str:
    """The corpus's front page (byte-identical for the same rows and settings)."""
    ids = {i.lower() for row in rows for i in [row["repo"], *row["aliases"]] if i}
    audited = sum(1 for row in rows if row.get("status") == AUDITED)
    body = (
        '<header class="wrap"><p><a href="../index.html">← the curated matrix</a></p>'
        "<h1>Template corpus: look up your model</h1>"
        f"<p>{len(rows)} distinct chat templates shipped by {len(ids)} hub model ids, {audited} audited "
        f"(seed {esc(settings.get('seed'))}, {esc(settings.get('count'))} generated conversations per variant). "
        "Text level: the template audited with a stand-in tokenizer (text stability and appends are real, token "
        "ids are not claimed); full: with the vocabulary of a model that ships this very template.</p></header>"
        '<main class="wrap"><section id="look-up"><h2>Look up your model</h2>'
        '<label for="lookup">Hub model id (org/name), template name or sha256: </label>'
        '<input id="lookup" type="search" size="60" autocomplete="off" placeholder="Qwen/Qwen3-8B">'
        '<div id="found" aria-live="polite"></div></section>'
        f'<section id="shares"><h2>Verdicts</h2>{_summary(rows)}{_refusal_list(rows)}</section>'
        f'<section id="templates"><h2>Every template</h2>{_table(rows)}</section>'
        '<p>Data: <a href="index.json">index.json</a>, <a href="corpus.csv">corpus.csv</a>, '
        '<a href="corpus.parquet">corpus.parquet</a>.</p></main>'
        '<script src="lookup.js"></script>'
    )
    return document("Template corpus — tito-audit", body, SCRIPT)
