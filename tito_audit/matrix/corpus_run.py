"""``tito-audit matrix --corpus DIR``: every template of a corpus audited as a matrix row, stored, resumable.

The run reads and checks the corpus (:mod:`tito_audit.matrix.corpus`), stages one folder per entry, audits the
folders through the matrix's own phases (:func:`tito_audit.matrix.run.audit_models`: the results store, the local
backend or Ray), and publishes the corpus's rows and pages (:mod:`tito_audit.matrix.corpus_publish`). Entries that
cannot be audited (file missing, sha256 not the index's, a template that does not load) keep their row with the
reason; no entry is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.matrix.corpus import Corpus, read_corpus, stage, stage_root
from tito_audit.matrix.corpus_publish import CorpusRow, compact_page, corpus_row, not_staged_row, write_corpus
from tito_audit.matrix.corpus_site import corpus_front_page
from tito_audit.matrix.matrix_options import MatrixOptions
from tito_audit.matrix.run import audit_models
from tito_audit.matrix.store import StoreCounts
from tito_audit.matrix.tasks import ProgressEvent
from tito_audit.outputs import ensure_folder

STAGE_FAILED = "not audited: not staged"


@dataclass
class CorpusRun:
    rows: list[CorpusRow]
    written: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """One line per entry that could not be audited from the corpus (missing file, sha256 mismatch)."""
    audited: int = 0
    from_store: int = 0
    store: StoreCounts = field(default_factory=StoreCounts)
    notes: list[str] = field(default_factory=list)


def corpus_settings(options: MatrixOptions, corpus: Corpus, label: str) -> dict[str, Any]:
    """What ``<out>/settings.json`` records to regenerate the corpus matrix as it was."""
    return {
        "corpus": label,
        "corpus_index_sha256": corpus.index_sha256,
        "mirrors": [str(m) for m in options.mirrors],
        "seed": options.seed,
        "count": options.count,
        "max_turns": options.max_turns,
        "examples_per_group": options.examples_per_group,
        "way_out_budget": options.way_out_budget,
    }


def run_corpus(
    folder: Path,
    options: MatrixOptions,
    stage_dir: Path,
    on_event: Callable[[ProgressEvent], None] | None = None,
    on_problem: Callable[[str], None] | None = None,
    label: str | None = None,
) -> CorpusRun:
    """Audit and publish the corpus in ``folder`` into ``options.out_dir`` (entries staged under ``stage_dir``).

    ``on_problem`` gets each entry's problem line as soon as it is found (the run goes on); ``label`` is how the
    pages and settings name the corpus folder (default: ``folder`` as given)."""
    label = str(folder) if label is None else label
    corpus = read_corpus(folder, options.mirrors)
    for problem in corpus.problems:
        if on_problem is not None:
            on_problem(problem)
    root = stage_root(stage_dir, corpus)
    staged: dict[str, str] = {}
    stage_failures: dict[str, str] = {}
    for entry in corpus.entries:
        if entry.problem:
            continue
        try:
            staged[entry.name] = str(stage(entry, root))
        except OSError as exc:
            stage_failures[entry.name] = f"{root / entry.name}: {exc.strerror or type(exc).__name__}"
    ensure_folder(options.out_dir)
    done = audit_models(list(staged.values()), options, on_event)
    identities = {identity.model_id: identity for identity in done.identities}
    rows: list[CorpusRow] = []
    pages: dict[str, str] = {}
    for entry in corpus.entries:
        if entry.name in stage_failures:
            rows.append(not_staged_row(entry, STAGE_FAILED, stage_failures[entry.name]))
            continue
        identity = identities.get(staged.get(entry.name, ""))
        outcome = done.outcomes.get(identity.key.digest) if identity is not None and identity.key else None
        row, published = corpus_row(entry, identity, outcome, label)
        rows.append(row)
        if published is not None:
            pages[entry.name] = compact_page(*published)
    settings = corpus_settings(options, corpus, label)
    written = write_corpus(rows, pages, options.out_dir, settings, corpus_front_page(rows, settings))
    return CorpusRun(
        rows=rows,
        written=written,
        problems=corpus.problems,
        audited=done.audited,
        from_store=done.pairs - done.audited,
        store=done.store.counts,
        notes=done.store.notes,
    )
