"""The compatibility matrix: many model ids, each (template, tokenizer) pair audited once.

A run has three phases:

1. identify: resolve every id and key its pair from the digests of its files, the settings and the tool
   version (:mod:`tito_audit.matrix.store`); ids that do not resolve get a row that says why;
2. audit: the first id of every pair whose result is not in the results store is audited by a backend
   (:mod:`tito_audit.matrix.backends`: this process, worker processes or Ray); each result is stored the
   moment it arrives, so an interrupted run resumes where it stopped;
3. publish: rows and pages from the results (:mod:`tito_audit.matrix.publish`).

The output depends only on the ids, their files and the settings: cold or warm, interrupted or not, local or
on Ray, the files are the same apart from timestamps and durations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tito_audit.audit.serialization import DecodeError
from tito_audit.matrix.backends import backend_for
from tito_audit.matrix.matrix_options import MATRIX_EXAMPLES_PER_GROUP, MatrixOptions
from tito_audit.matrix.publish import Outcome, PreviousRun, publish, report_stem
from tito_audit.matrix.row import MatrixRow, base_row
from tito_audit.matrix.store import ResultsStore, StoreCounts
from tito_audit.matrix.tasks import Identity, PairOutcome, PairResult, ProgressEvent, pair_result
from tito_audit.outputs import ensure_folder

SETTLED = "settled: "
"""The stage of the event sent just before ``done`` for an id not audited by itself in this run: ``settled: from
stored results``, ``settled: the pair of org/name``, ``settled: not audited: not reachable``."""

__all__ = [
    "MATRIX_EXAMPLES_PER_GROUP",
    "Audited",
    "MatrixInterrupted",
    "MatrixOptions",
    "MatrixRun",
    "ProgressEvent",
    "audit_models",
    "report_stem",
    "run_matrix",
]


def _failure_status(failure: MatrixRow | None) -> str:
    """What the progress line says of an id or pair that was not audited."""
    return (failure["status"] if failure is not None else "") or "not audited"


@dataclass
class MatrixRun:
    """The rows of a run and what it took to produce them."""

    rows: list[MatrixRow]
    model_ids: int = 0
    pairs: int = 0
    """Distinct (template, tokenizer) pairs among the ids that resolved."""
    audited: int = 0
    """Pairs audited in this run (the others came from the results store)."""
    store: StoreCounts = field(default_factory=StoreCounts)
    notes: list[str] = field(default_factory=list)
    """What went wrong with the results store (the run went on; see :mod:`tito_audit.matrix.store`)."""


class MatrixInterrupted(KeyboardInterrupt):
    """Ctrl-C during a matrix run; the message says what was kept (``13 of 63 results stored; run again to
    resume``). Every result that arrived before the interrupt is in the results store."""


def _stored(store: ResultsStore, identity: Identity) -> Outcome | None:
    assert identity.key is not None
    payload = store.get(identity.key)
    if payload is None:
        return None
    try:
        return pair_result(payload)
    except DecodeError:  # stored by a tool whose key did not change but whose result shape did: recompute
        store.counts.corrupt += 1
        return None


def longest_first(model_ids: list[str], options: MatrixOptions) -> list[str]:
    """``model_ids`` in the order workers take them: the longest audits of the output folder's last run first, ids it
    did not time before them all (they may be long), so that no long audit starts last and leaves a core idle at the
    end. The order decides nothing else: each result is its pair's alone."""
    previous = PreviousRun(options.out_dir).rows

    def seconds(model_id: str) -> float:
        row = previous.get(model_id)
        duration = row.get("duration_seconds") if row is not None else None
        return float(duration) if isinstance(duration, int | float) and duration else float("inf")

    return sorted(model_ids, key=seconds, reverse=True)  # stable: ties keep the sorted order


def _stored_by_digest(store: ResultsStore, digest: str) -> PairResult | None:
    """The pair result stored under ``digest`` (a row's ``results_key``), or None."""
    payload = store.stored(digest)
    if payload is None:
        return None
    try:
        return pair_result(payload)
    except DecodeError:
        return None


def _kept(store: ResultsStore, from_store: int, results: int, pairs: int) -> str:
    """What an interrupted run kept, in one line (``from_store``: results read from the store at the start;
    ``results``: all results at hand, computed or read)."""
    if store.root is None:
        return f"interrupted: {results} of {pairs} results computed, none stored (--no-results-cache)"
    if not store.writable:
        return f"interrupted: {results} of {pairs} results computed, none stored (the results store cannot be written)"
    return f"{from_store + store.counts.written} of {pairs} results stored; run again to resume"


@dataclass
class Audited:
    """Phases 1 and 2 of a run: every id's identity and every pair's outcome (by key digest)."""

    identities: list[Identity]
    outcomes: dict[str, Outcome]
    model_ids: int
    pairs: int
    audited: int
    store: ResultsStore


def audit_models(
    models: Sequence[str],
    options: MatrixOptions,
    on_event: Callable[[ProgressEvent], None] | None = None,
) -> Audited:
    """Identify ``models`` (sorted by model id, case-insensitively) and audit each pair not in the results store
    at most once; Ctrl-C raises :class:`MatrixInterrupted` once the results that arrived are stored."""
    ordered = sorted(dict.fromkeys(models), key=str.lower)
    store = ResultsStore(options.results_cache)
    backend = backend_for(options)

    def done(model_id: str, how: str | None = None) -> None:
        """The id's row is known; ``how``, when it was not audited in this run (an event of its own just before)."""
        if on_event is not None:
            if how is not None:
                on_event((model_id, SETTLED + how, 1, 1))
            on_event((model_id, "done", 1, 1))

    try:
        identities = backend.identify(ordered, options)
    except KeyboardInterrupt as interrupted:
        raise MatrixInterrupted("interrupted while reading the models' files: nothing was audited yet") from interrupted
    members: dict[str, list[Identity]] = {}
    for identity in identities:
        if identity.key is None:
            done(identity.model_id, _failure_status(identity.failure))
        else:
            members.setdefault(identity.key.digest, []).append(identity)
    outcomes: dict[str, Outcome] = {}
    to_audit: list[Identity] = []
    for digest, group in members.items():
        stored = _stored(store, group[0])
        if stored is None:
            to_audit.append(group[0])
            continue
        outcomes[digest] = stored
        for identity in group:
            done(identity.model_id, "from stored results")
    by_id = {identity.model_id: identity for identity in to_audit}
    from_store = len(outcomes)

    def on_outcome(outcome: PairOutcome) -> None:
        identity = by_id[outcome.model_id]
        assert identity.key is not None
        if outcome.result is not None:
            store.put(identity.key, outcome.result)
            outcomes[identity.key.digest] = pair_result(outcome.result)
        else:
            outcomes[identity.key.digest] = outcome.failure or base_row(identity.model_id, "")
        failed = None if outcome.result is not None else _failure_status(outcome.failure)
        for member in members[identity.key.digest]:
            same = f"the pair of {identity.model_id}" if member is not identity else None
            done(member.model_id, failed or same)

    queue = longest_first([identity.model_id for identity in to_audit], options)
    try:
        backend.audit(queue, options, on_outcome, on_event)
    except KeyboardInterrupt as interrupted:
        results = sum(1 for outcome in outcomes.values() if not isinstance(outcome, dict))
        raise MatrixInterrupted(_kept(store, from_store, results, len(members))) from interrupted
    return Audited(identities, outcomes, len(ordered), len(members), len(to_audit), store)


def run_matrix(
    models: Sequence[str],
    options: MatrixOptions,
    on_event: Callable[[ProgressEvent], None] | None = None,
) -> MatrixRun:
    """Rows for ``models`` (sorted by model id, case-insensitively), each pair audited at most once.

    Ctrl-C raises :class:`MatrixInterrupted` (a ``KeyboardInterrupt``) once the results that arrived are stored."""
    ensure_folder(options.out_dir)
    done = audit_models(models, options, on_event)
    rows = publish(done.identities, done.outcomes, options, lambda digest: _stored_by_digest(done.store, digest))
    return MatrixRun(rows, done.model_ids, done.pairs, done.audited, done.store.counts, done.store.notes)
