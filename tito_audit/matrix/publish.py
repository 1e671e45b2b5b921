"""From pair results to matrix rows and per-model pages.

Every model id gets a row. The first id (in sorted order) of each (template, tokenizer) pair is the pair's
representative: its report and way-out pages are written under its own name, from the pair's stored result
published under its id (the result does not depend on the id it was audited under). Every other id of the pair
gets the representative's verdict columns, its own identity columns and ``same_as`` naming the representative.

Results that did not change keep the timing of the run that produced them (read back from the output folder),
and every file is written only when its bytes change, so a re-run over unchanged models rewrites nothing.

A pair whose audit failed in this run (an audit error, a worker past its limit or dead) never takes away what was
published: each of its ids keeps its previous row (rebuilt from the previous result when the results store still
holds it, else as ``matrix.json`` had it, its pages left as they are), with a reason that names the failure and how to
retry it (:data:`~tito_audit.matrix.row.KEPT`). So a run can only improve the output folder; an id that was never
published gets the failure row.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import cast

from tito_audit.audit.results import AuditReport
from tito_audit.formatters import fix_report
from tito_audit.formatters.json_report import VOLATILE_KEYS, to_json
from tito_audit.formatters.markdown import to_markdown
from tito_audit.formatters.site import PageLinks, model_page
from tito_audit.matrix.disagreement_page import ModelComparison, disagreement_page
from tito_audit.matrix.front_page import PARSERS_PAGE
from tito_audit.matrix.matrix_options import MatrixOptions
from tito_audit.matrix.row import (
    AUDITED,
    COLUMNS,
    KEPT,
    VOLATILE_COLUMNS,
    MatrixRow,
    add_combined,
    base_row,
    cell,
    row_from_report,
)
from tito_audit.matrix.tasks import Identity, PairResult
from tito_audit.model.registry import family_of
from tito_audit.model.resolve import folder_name
from tito_audit.outputs import write_if_changed
from tito_audit.parse import engines

Outcome = PairResult | MatrixRow
"""A pair's result, or the failure row of its representative."""


def report_stem(model_id: str) -> str:
    return folder_name(model_id)


def _without(data: Mapping[str, object], keys: tuple[str, ...]) -> dict[str, object]:
    return {k: v for k, v in data.items() if k not in keys}


class PreviousRun:
    """What an earlier run left in the output folder: its rows and per-model JSON reports."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.rows: dict[str, MatrixRow] = {}
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            self.rows = {row["model_id"]: row for row in json.loads((out_dir / "matrix.json").read_text("utf-8"))}

    def report_timing(self, report: AuditReport, stem: str) -> AuditReport:
        """``report`` with the timing of the earlier report of ``stem`` when nothing else differs."""
        try:
            earlier = json.loads((self.out_dir / "models" / f"{stem}.json").read_text("utf-8"))
        except (OSError, ValueError):
            return report
        now = json.loads(to_json(report))  # compared as published: tuples read back as lists, keys as strings
        if not isinstance(earlier, dict) or _without(earlier, VOLATILE_KEYS) != _without(now, VOLATILE_KEYS):
            return report
        return replace(report, generated_at=earlier["generated_at"], duration_seconds=earlier["duration_seconds"])

    def row_timing(self, row: MatrixRow) -> MatrixRow:
        earlier = self.rows.get(row["model_id"])
        if earlier is None or _without(earlier, VOLATILE_COLUMNS) != _without(row, VOLATILE_COLUMNS):
            return row
        # the earlier row as read back from matrix.json: its volatile columns are the ones this run would write
        return cast(MatrixRow, {**row, **{column: earlier.get(column) for column in VOLATILE_COLUMNS}})


def published_under(report: AuditReport, identity: Identity) -> AuditReport:
    """The pair's report as the audit of ``identity`` would have written it (only where the files were found
    differs between ids of one pair)."""
    model = replace(
        report.model,
        model_id=identity.resolved_id or identity.model_id,
        source=identity.source,
        path=identity.location,
        revision=identity.revision,
    )
    return replace(report, model=model)


def _representative_row(
    identity: Identity, result: PairResult, options: MatrixOptions, previous: PreviousRun
) -> MatrixRow:
    stem = report_stem(identity.model_id)
    report = previous.report_timing(published_under(result.report, identity), stem)
    write_if_changed(options.out_dir / "models" / f"{stem}.json", to_json(report))
    links = PageLinks.published(stem, result.way_out)
    write_if_changed(options.out_dir / "models" / f"{stem}.md", to_markdown(report, result.way_out, links.fix))
    page = model_page(report, result.way_out, links)
    write_if_changed(options.out_dir / "models" / f"{stem}.html", page)
    row = row_from_report(report, f"models/{stem}.md", result.duration_seconds)
    if result.way_out is not None:
        fix_report.write(report, result.way_out, options.out_dir / "fixes", stem)
        row.update({"way_out": result.way_out.summary, "fix_report": f"fixes/{stem}.md"})
    if options.conversation_sources and report.text_level_only:
        row["verdict_with_real_data"] = "n/a (text level)"
    elif options.conversation_sources and result.real_data is not None:
        add_combined(row, result.real_data.verdict, result.real_data.causes)
    return row


def _same_pair_row(identity: Identity, representative: MatrixRow) -> MatrixRow:
    family = family_of(identity.model_id)
    row = representative.copy()
    row.update(
        {
            "model_id": identity.resolved_id or identity.model_id,
            "family": family.family if family else "",
            "same_as": representative["model_id"],
            "source": identity.source,
            "location": identity.location,
            "revision": identity.revision or "",
        }
    )
    return row


def _failure_row(identity: Identity, failure: MatrixRow) -> MatrixRow:
    return base_row(identity.model_id, failure["status"], failure["reason"])


def _keyed(row: MatrixRow, digest: str) -> MatrixRow:
    keyed = row.copy()
    keyed["results_key"] = digest
    return keyed


def kept_note(failure: MatrixRow) -> str:
    """The reason of a row that keeps its previous result: this run's failure and how to retry it."""
    reason = failure["reason"] or failure["status"]
    limit = ", with a higher --audit-seconds" if "--audit-seconds" in reason else ""
    return (
        f"{KEPT}this run's audit failed ({reason}); the row shows the result published before. Run the matrix "
        f"again to retry it{limit} (the other rows come from stored results)"
    )


StoredResult = Callable[[str], PairResult | None]
"""A stored pair result by its results key (None: not stored)."""


def _kept_row(
    identity: Identity, failure: MatrixRow, options: MatrixOptions, previous: PreviousRun, stored: StoredResult | None
) -> tuple[MatrixRow, PairResult | None] | None:
    """``identity``'s previous row with the note of this run's failure, and the previous result it was rebuilt from
    (None when the store no longer holds it: the row as published, its pages as they are); None when there is no
    audited previous row."""
    earlier = previous.rows.get(identity.model_id)
    if earlier is None or earlier.get("status") != AUDITED:
        return None
    result = stored(earlier["results_key"]) if stored is not None and earlier.get("results_key") else None
    if result is not None and not earlier.get("same_as"):
        row = _representative_row(identity, result, options, previous)
        row = previous.row_timing(_keyed(row, earlier["results_key"]))
    else:
        row, result = cast(MatrixRow, {column: earlier.get(column, "") for column in COLUMNS}), None
    row["reason"] = kept_note(failure)
    return row, result


def publish(
    identities: list[Identity],
    outcomes: dict[str, Outcome],
    options: MatrixOptions,
    stored: StoredResult | None = None,
) -> list[MatrixRow]:
    """The rows of ``identities`` (in their order), writing the representatives' pages; ``stored``: the results
    store, where a failed pair's previous result is looked for (see the module docstring)."""
    previous = PreviousRun(options.out_dir)
    representatives: dict[str, MatrixRow] = {}
    kept_results: dict[str, Outcome] = {}
    rows = []
    for identity in identities:
        if identity.failure is not None or identity.key is None:
            rows.append(previous.row_timing(identity.failure or base_row(identity.model_id, "")))
            continue
        outcome = outcomes[identity.key.digest]
        digest = identity.key.digest  # the results key: everything that decided the row (its files, settings, code)
        if isinstance(outcome, dict):
            kept = _kept_row(identity, outcome, options, previous, stored)
            if kept is None:
                row = previous.row_timing(_keyed(_failure_row(identity, outcome), digest))
            else:
                row, result = kept
                if result is not None:
                    kept_results[digest] = result
        elif identity.key.digest in representatives:  # the representative's timing, already settled
            row = _same_pair_row(identity, representatives[identity.key.digest])
        else:
            row = previous.row_timing(_keyed(_representative_row(identity, outcome, options, previous), digest))
            representatives[identity.key.digest] = row
        rows.append(row)
    prune_pages(rows, options.out_dir)
    write_disagreements(identities, {**outcomes, **kept_results}, options.out_dir)
    return rows


def write_disagreements(identities: list[Identity], outcomes: dict[str, Outcome], out_dir: Path) -> None:
    """``parsers.html``: every representative's engines side by side (see :mod:`.disagreement_page`)."""
    entries, seen = [], set()
    for identity in identities:
        if identity.key is None:
            continue
        outcome = outcomes.get(identity.key.digest)
        if not isinstance(outcome, PairResult) or outcome.engines is None or identity.key.digest in seen:
            continue
        seen.add(identity.key.digest)
        stem = report_stem(identity.model_id)
        entries.append(
            ModelComparison(identity.resolved_id or identity.model_id, f"models/{stem}.html", outcome.engines)
        )
    installed_here = [engine.name for engine in engines.ENGINES if engine.installed()]
    write_if_changed(out_dir / PARSERS_PAGE, disagreement_page(entries, installed_here))


def prune_pages(rows: list[MatrixRow], out_dir: Path) -> None:
    """Remove per-model and way-out pages that no row refers to (a model that left the matrix, a way out that
    changed, an id that became the duplicate of another)."""
    for folder, column, suffixes in (
        ("models", "report", (".md", ".json", ".html")),
        ("fixes", "fix_report", (".md", ".diff")),
    ):
        path = out_dir / folder
        if not path.is_dir():
            continue
        pages = (cell(row, column) for row in rows if not row.get("same_as"))
        kept = {Path(page).stem for page in pages if isinstance(page, str) and page}
        kept |= {f"{stem}.training" for stem in kept}  # a way out's training-form diff: <stem>.training.diff
        for item in path.iterdir():
            if item.suffix in suffixes and item.stem not in kept:
                item.unlink()
