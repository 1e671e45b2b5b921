"""Matrix outputs: Markdown, CSV and JSON (pandas), Parquet (datasets) and a static HTML page."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tito_audit.matrix_row import COLUMNS

MARKDOWN_COLUMNS = (
    ("model", "model_id"),
    ("family", "family"),
    ("level", "audit_level"),
    ("verdict", "verdict"),
    ("variants", "variant_verdicts"),
    ("tool", "rollout_tool"),
    ("user", "rollout_user"),
    ("system", "rollout_system"),
    ("main causes", "main_causes"),
    ("roundtrip beyond non-canonical", "roundtrip_findings"),
    ("refused shapes", "refused_shapes"),
    ("report", "report"),
)


def rows_frame(rows: Sequence[dict[str, Any]]):
    import pandas as pd

    return pd.DataFrame(list(rows), columns=list(COLUMNS))


def _cell(value: Any, limit: int = 160) -> str:
    text = "" if value is None else str(value)
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("|", "\\|").replace("\n", " ")


def short_reason(reason: str) -> str:
    """The decisive part of a reason: for "not found; tried: a; b; hub (disabled)" the last attempt."""
    if "; tried: " in reason:
        return "not found; " + reason.rsplit("; ", 1)[-1]
    return reason


def to_markdown(rows: Sequence[dict[str, Any]], settings: dict[str, Any]) -> str:
    header = "| " + " | ".join(title for title, _ in MARKDOWN_COLUMNS) + " |"
    lines = [
        "# TITO compatibility matrix",
        "",
        "Which chat templates let an RL loop keep one token buffer and only append to it "
        "(token-in, token-out) when tool results and user turns are appended. Produced by `tito-audit matrix` "
        f"(seed {settings.get('seed')}, {settings.get('count')} generated conversations per variant). "
        "`tool`/`user`/`system`: whether appended steps of that kind are text- and seam-stable over all variants. "
        "`text-level only` rows were audited from the chat template without the model's vocabulary.",
        "",
        header,
        "|" + "---|" * len(MARKDOWN_COLUMNS),
    ]
    for row in rows:
        cells = []
        for _title, key in MARKDOWN_COLUMNS:
            value = row.get(key)
            if key == "verdict" and not value:
                value = row.get("status")
            if key == "report" and value:
                value = f"[report]({value})"
            if key == "variant_verdicts" and row.get("reason"):
                value = short_reason(row["reason"])
            cells.append(_cell(value, 220 if key in ("variant_verdicts", "refused_shapes") else 160))
        lines.append("| " + " | ".join(cells) + " |")
    audited = [r for r in rows if r.get("status") == "audited"]
    lines += ["", f"{len(audited)} of {len(rows)} models audited; the others are listed with the reason."]
    return "\n".join(lines) + "\n"


def write_tables(rows: Sequence[dict[str, Any]], out_dir: Path) -> None:
    """``matrix.csv`` and ``matrix.json`` with pandas, ``matrix.parquet`` through ``datasets``."""
    frame = rows_frame(rows)
    frame.to_csv(out_dir / "matrix.csv", index=False)
    (out_dir / "matrix.json").write_text(
        json.dumps(
            frame.astype(object).where(frame.notna(), None).to_dict(orient="records"), ensure_ascii=False, indent=1
        )
        + "\n",
        encoding="utf-8",
    )
    from datasets import Dataset

    table = frame.astype({c: "string" for c in frame.columns if c not in ("seed", "count", "duration_seconds")})
    Dataset.from_pandas(table, preserve_index=False).to_parquet(str(out_dir / "matrix.parquet"))


def write_matrix(rows: Sequence[dict[str, Any]], out_dir: Path, settings: dict[str, Any]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_tables(rows, out_dir)
    (out_dir / "matrix.md").write_text(to_markdown(rows, settings), encoding="utf-8")
    (out_dir / "index.html").write_text(to_html(rows, settings), encoding="utf-8")
    (out_dir / "matrix_settings.json").write_text(json.dumps(settings, indent=1) + "\n", encoding="utf-8")
    names = ("matrix.md", "matrix.csv", "matrix.json", "matrix.parquet", "index.html", "matrix_settings.json")
    return [out_dir / name for name in names]


_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>TITO compatibility matrix</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
table { border-collapse: collapse; width: 100%; font-size: 0.85rem; }
th, td { border: 1px solid #ddd; padding: 0.3rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; cursor: pointer; user-select: none; position: sticky; top: 0; }
th[aria-sort="ascending"]::after { content: " ▲"; }
th[aria-sort="descending"]::after { content: " ▼"; }
tr.model:hover { background: #f7fbff; cursor: pointer; }
.ready { color: #1a7f37; font-weight: 600; } .ready-tool-only { color: #9a6700; font-weight: 600; }
.broken { color: #cf222e; font-weight: 600; } .unsupported { color: #8250df; font-weight: 600; }
.controls { margin: 1rem 0; display: flex; gap: 1rem; align-items: center; flex-wrap: wrap; }
#details { margin-top: 1rem; padding: 1rem; border: 1px solid #ccc; background: #fafafa; display: none; }
#details dt { font-weight: 600; } #details dd { margin: 0 0 0.5rem 1rem; white-space: pre-wrap; }
.muted { color: #666; }
</style>
</head>
<body>
<h1>TITO compatibility matrix</h1>
<p class="muted">__SUMMARY__</p>
<div class="controls">
  <label>Filter <input id="filter" type="search" placeholder="model, family, cause…"></label>
  <label>Verdict <select id="verdict">
    <option value="">all</option><option>ready</option><option>ready-tool-only</option>
    <option>broken</option><option>unsupported</option><option value="not audited">not audited</option>
  </select></label>
  <span id="shown" class="muted"></span>
</div>
<table id="matrix"><thead><tr></tr></thead><tbody></tbody></table>
<div id="details"><h2 id="details-title"></h2><dl id="details-list"></dl></div>
<script id="matrix-data" type="application/json">__DATA__</script>
<script>
const rows = JSON.parse(document.getElementById("matrix-data").textContent);
const columns = [["model_id","model"],["family","family"],["audit_level","level"],["verdict","verdict"],
  ["rollout_tool","tool"],["rollout_user","user"],["rollout_system","system"],["main_causes","main causes"],
  ["roundtrip_findings","roundtrip"],["refused_shapes","refused shapes"]];
let sortKey = "model_id", sortDir = 1;
const head = document.querySelector("#matrix thead tr"), body = document.querySelector("#matrix tbody");
const verdictOf = r => r.verdict || r.status;
columns.forEach(([key, title]) => {
  const th = document.createElement("th"); th.textContent = title; th.dataset.key = key;
  th.addEventListener("click", () => { sortDir = sortKey === key ? -sortDir : 1; sortKey = key; render(); });
  head.appendChild(th);
});
function render() {
  const text = document.getElementById("filter").value.toLowerCase();
  const verdict = document.getElementById("verdict").value;
  const shown = rows.filter(r => (!text || JSON.stringify(r).toLowerCase().includes(text))
    && (!verdict || String(verdictOf(r)).startsWith(verdict)));
  shown.sort((a, b) => String(a[sortKey] || verdictOf(a)).localeCompare(String(b[sortKey] || verdictOf(b))) * sortDir);
  body.innerHTML = "";
  for (const r of shown) {
    const tr = document.createElement("tr"); tr.className = "model"; tr.dataset.model = r.model_id;
    for (const [key] of columns) {
      const td = document.createElement("td");
      const value = key === "verdict" ? verdictOf(r) : (r[key] ?? "");
      td.textContent = value; if (key === "verdict") td.className = String(value).split(":")[0];
      tr.appendChild(td);
    }
    tr.addEventListener("click", () => details(r));
    body.appendChild(tr);
  }
  head.querySelectorAll("th").forEach(th => th.setAttribute("aria-sort",
    th.dataset.key === sortKey ? (sortDir > 0 ? "ascending" : "descending") : "none"));
  document.getElementById("shown").textContent = shown.length + " of " + rows.length + " models";
}
function details(r) {
  const box = document.getElementById("details"), list = document.getElementById("details-list");
  document.getElementById("details-title").textContent = r.model_id;
  list.innerHTML = "";
  for (const [key, value] of Object.entries(r)) {
    if (value === null || value === "") continue;
    const dt = document.createElement("dt"); dt.textContent = key;
    const dd = document.createElement("dd");
    if (key === "report") {
      for (const ext of [".md", ".json"]) {
        const a = document.createElement("a"); a.href = String(value).replace(/\\.md$/, ext);
        a.textContent = a.getAttribute("href"); dd.appendChild(a); dd.appendChild(document.createTextNode("  "));
      }
    } else { dd.textContent = value; }
    list.appendChild(dt); list.appendChild(dd);
  }
  box.style.display = "block";
}
document.getElementById("filter").addEventListener("input", render);
document.getElementById("verdict").addEventListener("change", render);
render();
</script>
</body>
</html>
"""


def to_html(rows: Sequence[dict[str, Any]], settings: dict[str, Any]) -> str:
    """A static page (no network): sortable columns, a text and a verdict filter, a detail pane per model."""
    data = json.dumps(list(rows), ensure_ascii=False).replace("</", "<\\/")
    audited = sum(1 for r in rows if r.get("status") == "audited")
    summary = html.escape(
        f"{audited} of {len(rows)} models audited; seed {settings.get('seed')}, {settings.get('count')} conversations "
        "per variant. Click a column to sort, a row for details."
    )
    return _HTML.replace("__SUMMARY__", summary).replace("__DATA__", data)
