"""A template corpus's matrix as published: ``<out>/index.json`` (one entry per template), ``corpus.csv`` and
``corpus.parquet`` (the same rows, aliases joined by spaces), ``lookup.js`` (every hub id and sha256 to its
template, for the front page's search), ``index.html`` and a page per audited template in ``templates/``.

Pages are kept compact so that 786 of them stay small enough to browse and clone: one HTML page per template (no
per-template JSON or Markdown: the rows hold the data, the results store the whole reports), the style sheet
shared in ``style.css`` instead of inlined in every page, and the examples per failure group the corpus run keeps
(``--examples``, 1 by default for a corpus).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypedDict, cast

from tito_audit.audit.results import AuditReport
from tito_audit.formatters.site import PageLinks, model_page
from tito_audit.formatters.site.style import CSS
from tito_audit.matrix.corpus import CorpusEntry
from tito_audit.matrix.publish import Outcome
from tito_audit.matrix.row import AUDITED, MatrixRow, cell, row_from_report
from tito_audit.matrix.tables import _parquet_bytes
from tito_audit.matrix.tasks import Identity, PairResult
from tito_audit.outputs import ensure_folder, write_if_changed
from tito_audit.parse import engines

COLUMNS = (
    "name",
    "origin",
    "repo",
    "downloads",
    "aliases",
    "model_ids",
    "sha256",
    "level",
    "tokenizer",
    "status",
    "reason",
    "verdict",
    *(f"{engine.name}_verdict" for engine in engines.ENGINES),
    "variant_verdicts",
    "main_causes",
    "refused",
    "way_out",
    "mask",
    "page",
    "duration_seconds",
)
"""The columns of a corpus row; ``<engine>_verdict`` (the verdict with that engine's documented parsers, one column
per engine) only when some audited row carries one."""
ENGINE_VERDICTS = tuple(f"{engine.name}_verdict" for engine in engines.ENGINES)


class CorpusRow(TypedDict):
    """A corpus row: one template, its columns those of :data:`COLUMNS` (a test holds the two equal) but the
    ``<engine>_verdict`` columns (:data:`ENGINE_VERDICTS`, one per engine of
    :data:`~tito_audit.parse.engines.ENGINES`), which are present only on a row audited with that engine's parsers
    (and come last in ``index.json``, in the order they were added); code reads and writes them by their computed
    names through :func:`~tito_audit.matrix.row.cell`."""

    name: str
    origin: str
    repo: str
    downloads: int
    aliases: list[str]
    """The entry's hub ids besides ``repo`` (joined by spaces in the CSV and Parquet files)."""
    model_ids: int
    sha256: str
    level: str
    tokenizer: str
    status: str
    reason: str
    verdict: str
    variant_verdicts: str
    main_causes: str
    refused: str
    way_out: str
    mask: str
    page: str
    duration_seconds: float | None


INTEGER_COLUMNS = ("downloads", "model_ids")
PAGES = "templates"
INLINE_CSS = f"<style>\n{CSS.strip()}\n</style>"
SHARED_CSS = '<link rel="stylesheet" href="../style.css">'


def _refusal(row: MatrixRow) -> str:
    """The first (most frequent) refusal reason of an audited row: what an unsupported template refuses."""
    shapes = row.get("refused_shapes") or ""
    return shapes.split("; ")[0].split("× ", 1)[-1] if shapes else ""


def _row(entry: CorpusEntry) -> CorpusRow:
    row = cast(CorpusRow, dict.fromkeys(COLUMNS, ""))
    row.update(
        {
            "name": entry.name,
            "origin": entry.origin,
            "repo": entry.repo or "",
            "downloads": entry.downloads,
            "aliases": [i for i in entry.model_ids if i != entry.repo],
            "model_ids": len(entry.model_ids),
            "sha256": entry.sha256,
            "tokenizer": entry.tokenizer_id,
            "duration_seconds": None,
        }
    )
    for column in ENGINE_VERDICTS:
        del cast("dict[str, object]", row)[column]
    return row


def corpus_row(
    entry: CorpusEntry, identity: Identity | None, outcome: Outcome | None, corpus_label: str
) -> tuple[CorpusRow, tuple[AuditReport, PairResult] | None]:
    """The row of ``entry`` and the report to publish as its page (None for a row that was not audited)."""
    row = _row(entry)
    if entry.problem:
        row.update({"status": entry.status, "reason": entry.problem})
        return row, None
    if identity is None or identity.failure is not None or outcome is None or isinstance(outcome, dict):
        failure = (identity.failure if identity is not None else None) or outcome
        status, reason = (failure["status"], failure["reason"]) if isinstance(failure, dict) else ("", "")
        row.update({"status": status or "not audited", "reason": reason or "no result"})
        return row, None
    assert isinstance(outcome, PairResult)
    report = outcome.report
    model = replace(
        report.model,
        model_id=entry.model_id,
        source="corpus",
        path=f"{corpus_label}/templates/{entry.name}.jinja",
        revision=None,
    )
    report = replace(report, model=model)
    audit_row = row_from_report(report, "", outcome.duration_seconds)
    row.update(
        {
            "level": "full" if audit_row["audit_level"] == "full" else "text",
            "status": AUDITED,
            "verdict": audit_row["verdict"],
            "variant_verdicts": audit_row["variant_verdicts"],
            "main_causes": audit_row["main_causes"],
            "refused": _refusal(audit_row),
            "way_out": outcome.way_out.summary if outcome.way_out is not None else outcome.way_out_note,
            "mask": audit_row["mask"],
            "page": f"{PAGES}/{entry.name}.html",
            "duration_seconds": audit_row["duration_seconds"],
        }
    )
    for column in ENGINE_VERDICTS:
        if verdict := cell(audit_row, column):
            cast("dict[str, object]", row)[column] = verdict
    if report.model.template_sha256 and report.model.template_sha256 != entry.sha256:
        loaded = report.model.template_sha256
        reason = f"the audit loaded a template of sha256 {loaded[:12]}…, not the entry's {entry.sha256[:12]}…"
        row.update({"status": "not audited: another template was loaded", "reason": reason, "page": ""})
        return row, None
    return row, (report, outcome)


def not_staged_row(entry: CorpusEntry, status: str, reason: str) -> CorpusRow:
    row = _row(entry)
    row.update({"status": status, "reason": reason})
    return row


def compact_page(report: AuditReport, result: PairResult) -> str:
    """A template's page: the model page, its style sheet shared (``../style.css``) instead of inlined."""
    page = model_page(report, result.way_out, PageLinks(index="../index.html"), compact=True)
    return page.replace(INLINE_CSS, SHARED_CSS, 1)


def lookup_data(rows: Sequence[CorpusRow]) -> dict[str, Any]:
    """What the front page's search reads: every hub id (lowercased) and sha256 to its row's position, and the
    columns a result shows."""
    ids: dict[str, int] = {}
    for position, row in enumerate(rows):
        for model_id in [row["repo"], *row["aliases"]]:
            if model_id:
                ids.setdefault(model_id.lower(), position)
        ids.setdefault(row["name"].lower(), position)
        ids.setdefault(row["sha256"], position)
    shown = [
        [
            row["name"],
            row["repo"] or (row["aliases"][0] if row["aliases"] else ""),
            row["verdict"] or row["status"],
            row["level"],
            row["main_causes"] or row["refused"] or row["reason"],
            row["way_out"],
            row["page"],
            row["downloads"],
            row["model_ids"],
            "; ".join(
                f"with {engine.label}'s parser: {verdict}"
                for engine in engines.ENGINES
                if (verdict := cell(row, f"{engine.name}_verdict"))
            ),
        ]
        for row in rows
    ]
    return {"ids": dict(sorted(ids.items())), "rows": shown}


def _flat(rows: Sequence[CorpusRow]):
    import pandas as pd

    columns = [c for c in COLUMNS if c not in ENGINE_VERDICTS or any(c in row for row in rows)]
    frame = pd.DataFrame([{**row, "aliases": " ".join(row["aliases"])} for row in rows], columns=columns)
    return frame.astype(
        {
            **{c: "string" for c in columns if c not in (*INTEGER_COLUMNS, "duration_seconds")},
            **dict.fromkeys(INTEGER_COLUMNS, "Int64"),
        }
    )


def write_corpus(
    rows: Sequence[CorpusRow],
    pages: dict[str, str],
    out_dir: Path,
    settings: dict[str, Any],
    front: str,
) -> list[Path]:
    """Every corpus file (each rewritten only when its bytes change); pages no row refers to are removed."""
    ensure_folder(out_dir / PAGES)
    write_if_changed(out_dir / "style.css", CSS.strip() + "\n")
    for name, page in pages.items():
        write_if_changed(out_dir / PAGES / f"{name}.html", page)
    for item in (out_dir / PAGES).iterdir():
        if item.suffix == ".html" and item.stem not in pages:
            item.unlink()
    records = json.dumps(list(rows), ensure_ascii=False, indent=1) + "\n"
    index = out_dir / "index.json"
    derived = (out_dir / "corpus.csv", out_dir / "corpus.parquet")
    if not (_holds(index, records) and all(path.is_file() for path in derived)):
        write_if_changed(derived[0], _flat(rows).to_csv(index=False))
        write_if_changed(derived[1], _parquet_of(rows))
        write_if_changed(index, records)
    lookup = json.dumps(lookup_data(rows), ensure_ascii=False, separators=(",", ":"))
    write_if_changed(out_dir / "lookup.js", f"window.CORPUS = {lookup};\n")
    write_if_changed(out_dir / "settings.json", json.dumps(settings, indent=1) + "\n")
    write_if_changed(out_dir / "index.html", front)
    names = ("index.html", "index.json", "corpus.csv", "corpus.parquet", "lookup.js", "settings.json")
    return [out_dir / name for name in names] + [out_dir / PAGES]


def _parquet_of(rows: Sequence[CorpusRow]) -> bytes:
    return _parquet_bytes(rows, frame=_flat(rows))


def _holds(path: Path, text: str) -> bool:
    try:
        return path.read_bytes() == text.encode("utf-8")
    except OSError:
        return False
