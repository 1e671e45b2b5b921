"""The two kinds of work a matrix hands to its workers, as module-level functions any backend can run.

- :func:`identify`: resolve a model id and compute the key of its (template, tokenizer) pair; cheap, no
  tokenizer is loaded.
- :func:`audit_pair`: resolve, load and audit one model id (the first id of a pair), find its way out and run
  the real-data audit; returns plain data the driver stores under the pair's key.

Both never raise for a model's own problems: they return a failure row instead, so one bad folder cannot stop
the matrix.
"""

from __future__ import annotations

import functools
import gc
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from tito_audit.audit.audit_options import AuditOptions
from tito_audit.audit.disagreement import EngineComparison
from tito_audit.audit.results import UNSUPPORTED, AuditReport, plain, worst_verdict
from tito_audit.audit.serialization import DecodeError, from_dict
from tito_audit.errors import AuditError, ResolutionError
from tito_audit.formatters.fix_report import FixPage
from tito_audit.matrix.matrix_options import MatrixOptions
from tito_audit.matrix.row import AUDIT_ERROR, FAILED_TO_LOAD, NOT_REACHABLE, MatrixRow, base_row
from tito_audit.matrix.store import PairKey, pair_key
from tito_audit.model.registry import family_of

if TYPE_CHECKING:
    from tito_audit.model.load_folder import LoadedModel

ProgressEvent = tuple[str, str, int, int]
"""(model id, stage or variant, done, total)."""


@dataclass(frozen=True)
class Identity:
    """Where a model id's files are and the key of its pair (``failure``: the row of an id that did not
    resolve)."""

    model_id: str
    """As given (an id, or a folder path)."""
    key: PairKey | None = None
    resolved_id: str = ""
    """The id the resolution found (a folder's ``<org>--<name>`` read back as ``org/name``)."""
    source: str = ""
    location: str = ""
    revision: str | None = None
    failure: MatrixRow | None = None


@dataclass
class RealData:
    """The combined audit (generated + real trajectories): its verdict and the causes it found."""

    verdict: str
    causes: str


@dataclass
class PairResult:
    """Everything the matrix publishes for a pair, independent of the model id it is published under."""

    report: AuditReport
    way_out: FixPage | None
    real_data: RealData | None
    duration_seconds: float
    way_out_note: str = ""
    """Why there is no way out although the verdict asks for one (its search passed ``way_out_budget``)."""
    engines: EngineComparison | None = None
    """Where the parsers of the engines documented for the model disagree (None: fewer than two engines here)."""


def pair_payload(result: PairResult) -> dict[str, Any]:
    """A result as stored and sent between processes: ``plain(result)`` (its report as in the JSON report) without the
    report's verdict, which is derived from the variants' verdicts again on reading (:func:`pair_result`), so that it
    is never stored twice and an edited store entry cannot make a row say one thing and its variants another."""
    payload = plain(result)
    del payload["report"]["verdict"]
    return payload


def pair_result(payload: Any) -> PairResult:
    """A :class:`PairResult` from :func:`pair_payload`'s data, its report's verdict the worst of its variants'
    (raises :class:`~tito_audit.audit.serialization.DecodeError` when the data has another shape)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("report"), dict):
        raise DecodeError("not a stored pair result")
    report = {key: value for key, value in payload["report"].items() if key != "verdict"}
    result = from_dict(PairResult, {**payload, "report": {**report, "verdict": UNSUPPORTED}})
    result.report.verdict = worst_verdict([variant.verdict for variant in result.report.variants])
    return result


@dataclass
class PairOutcome:
    """What :func:`audit_pair` returns: the result as plain data (:func:`pair_payload`) or a failure row."""

    model_id: str
    result: dict[str, Any] | None = None
    failure: MatrixRow | None = None


@functools.cache
def _source_digest(source: str) -> str:
    """A conversation source's sha256 when it is a local file; a hub dataset id stands for itself."""
    from tito_audit.model.resolve import sha256_file

    path = Path(source)
    return sha256_file(path) if path.is_file() else f"id:{source}"


def audit_settings(options: MatrixOptions) -> dict[str, Any]:
    """The settings that decide an audit's result, as they enter the results key."""
    return {
        "seed": options.seed,
        "count": options.count,
        "max_turns": options.max_turns,
        "max_examples_per_group": options.examples_per_group,
        "pinned_kwargs": {},
        "conversations": [[Path(s).name, _source_digest(s)] for s in options.conversation_sources],
        "conversations_limit": options.conversations_limit,
        "parser": options.parser,
    } | ({"way_out_budget": options.way_out_budget} if options.way_out_budget is not None else {})


def engines_used(parser: str, model_id: str) -> dict[str, list[str | None]]:
    """The engines whose parsers an audit of ``model_id`` runs under ``parser`` (decided without importing them),
    each with its tool-call and reasoning parsers as recorded and its parsers' version: a result made with other
    engines, other parsers or another version of them is another result."""
    from tito_audit.parse.choice import engines_planned
    from tito_audit.parse.engines import engine_named

    used: dict[str, list[str | None]] = {}
    for name in engines_planned(parser, model_id):
        engine = engine_named(name)
        pair = engine.recorded(model_id) if engine is not None else None
        used[name] = [
            pair.tool if pair is not None else None,
            pair.reasoning if pair is not None else None,
            engine.version() if engine is not None else None,
        ]
    return used


def identify(model_id: str, options: MatrixOptions, libraries: dict[str, str] | None = None) -> Identity:
    """Resolve ``model_id`` and key its pair (file digests are computed once per file per process; ``libraries``:
    the library versions, when the caller read them already)."""
    from tito_audit.audit.service import library_versions
    from tito_audit.model.resolve import resolve_model

    try:
        resolved = resolve_model(
            model_id, mirrors=options.mirrors, cache_dir=options.cache_dir, allow_hub=options.allow_hub
        )
        files = resolved.file_hashes()
    except ResolutionError as exc:
        return Identity(model_id, failure=base_row(model_id, NOT_REACHABLE, str(exc)))
    except OSError as exc:
        return Identity(model_id, failure=base_row(model_id, FAILED_TO_LOAD, f"{type(exc).__name__}: {exc}"))
    family = family_of(model_id)
    libraries = library_versions() if libraries is None else libraries
    settings = audit_settings(options) | {"engines": engines_used(options.parser, resolved.model_id)}
    key = pair_key(files, family.special_tokens if family else None, settings, libraries)
    return Identity(
        model_id,
        key=key,
        resolved_id=resolved.model_id,
        source=resolved.source,
        location=resolved.location or str(resolved.path),
        revision=resolved.revision,
    )


def identify_many(model_ids: list[str], options: MatrixOptions) -> list[Identity]:
    """Every id's identity, the library versions read once (reading them costs more than hashing a template)."""
    from tito_audit.audit.service import library_versions

    libraries = library_versions()
    return [identify(model_id, options, libraries) for model_id in model_ids]


_REAL_CONVERSATIONS: dict[tuple, list] = {}


def _real_conversations(options: MatrixOptions) -> list:
    """The real trajectories, loaded once per worker process."""
    from tito_audit.conversations.datasources import load_conversations

    key = (tuple(options.conversation_sources), options.conversations_limit)
    if key not in _REAL_CONVERSATIONS:
        loaded = []
        for source in options.conversation_sources:
            loaded += load_conversations(source, limit=options.conversations_limit).conversations
        _REAL_CONVERSATIONS[key] = loaded
    return _REAL_CONVERSATIONS[key]


def audit_pair(model_id: str, options: MatrixOptions, events: Any = None) -> PairOutcome:
    """Resolve, load and audit ``model_id``; its way out and real-data verdict when the matrix asks for them."""
    from tito_audit.audit.service import audit
    from tito_audit.formatters.fix_report import page_of
    from tito_audit.model.load_by_id import load_resolved
    from tito_audit.model.resolve import resolve_model
    from tito_audit.parse.choice import start_ahead
    from tito_audit.repair.way_out import find_way_out, needs_way_out, remembering

    def emit(stage: str, done: int, total: int) -> None:
        if events is not None:
            events.put((model_id, stage, done, total))

    started = time.monotonic()
    emit("loading", 0, 1)
    try:
        resolved = resolve_model(
            model_id, mirrors=options.mirrors, cache_dir=options.cache_dir, allow_hub=options.allow_hub
        )
    except ResolutionError as exc:
        return PairOutcome(model_id, failure=base_row(model_id, NOT_REACHABLE, str(exc)))
    start_ahead(options.parser, resolved.model_id)  # one vLLM worker per worker process: started once, kept
    try:
        loaded = load_resolved(resolved)
    except AuditError as exc:
        return PairOutcome(model_id, failure=base_row(model_id, FAILED_TO_LOAD, str(exc)))
    except Exception as exc:  # a broken tokenizer folder must not stop the matrix
        return PairOutcome(model_id, failure=base_row(model_id, FAILED_TO_LOAD, f"{type(exc).__name__}: {exc}"))
    settings = AuditOptions(
        seed=options.seed,
        count=options.count,
        max_turns=options.max_turns,
        max_examples_per_group=options.examples_per_group,
        parser=options.parser,
    )
    try:
        report = audit(loaded, settings, progress=lambda variant, done, total: emit(variant, done, total))
        explain(report, loaded)
        page, way_out_note = None, ""
        if needs_way_out(report):
            emit("way out", 0, 1)
            try:
                plain = replace(settings, parser="template")  # the way out is the template's; no parser needed
                # the budget counts every audit asked for, remembered or not: a result never changes with speed
                search = budgeted(remembering(audit), report, options)
                page = page_of(find_way_out(loaded, report, plain, search), report)
            except WayOutOverBudget as over:
                way_out_note = str(over)
        real_data = None
        if options.conversation_sources and not report.text_level_only:
            emit("real conversations", 0, 1)
            combined = audit(
                loaded,
                replace(
                    settings,
                    parser="template",
                    conversations=_real_conversations(options),
                    with_generated=True,
                    conversations_source="generated + " + ", ".join(Path(s).name for s in options.conversation_sources),
                ),
            )
            real_data = real_data_of(combined)
        engines = compare(loaded, settings, emit)
        result = PairResult(report, page, real_data, round(time.monotonic() - started, 2), way_out_note, engines)
        return PairOutcome(model_id, result=pair_payload(result))
    except Exception as exc:
        return PairOutcome(model_id, failure=base_row(model_id, AUDIT_ERROR, f"{type(exc).__name__}: {exc}"))
    finally:
        del loaded
        gc.collect()


def compare(
    loaded: LoadedModel, settings: AuditOptions, emit: Callable[[str, int, int], None]
) -> EngineComparison | None:
    """The engines' parsers side by side on the model's completions, when its documented parsers of two or more
    engines are installed (:mod:`tito_audit.audit.disagreement`)."""
    from tito_audit.audit.disagreement import compare_engines
    from tito_audit.model.load_folder import codec_for
    from tito_audit.parse.choice import choose_parsers

    plan = choose_parsers(settings.parser, loaded.resolved.model_id, codec_for(loaded).tokenizer, loaded.resolved.path)
    if len({choice.engine for choice in plan.choices if choice.engine}) < 2:
        return None
    emit("engines side by side", 0, 1)
    return compare_engines(loaded, plan.choices, settings)


RunAudit: TypeAlias = "Callable[[LoadedModel, AuditOptions], AuditReport]"
"""How the way-out search audits a candidate fix (the model with the fixed template, the settings)."""


class WayOutOverBudget(Exception):
    """The way-out search would pass ``MatrixOptions.way_out_budget``; the message says so in one line."""


def budgeted(run_audit: RunAudit, report: AuditReport, options: MatrixOptions) -> RunAudit:
    """``run_audit`` for the way-out search, refusing (:class:`WayOutOverBudget`) the audit that would pass the
    budget: variant audits (each fix is audited under every variant of ``report``), counted, not timed, so that
    the same template and settings always end the same way."""
    budget = options.way_out_budget
    if budget is None:
        return run_audit
    variants = max(len(report.variants), 1)
    spent = 0

    def run(loaded: LoadedModel, settings: AuditOptions) -> AuditReport:
        nonlocal spent
        if spent + variants > budget:
            raise WayOutOverBudget(
                f"not searched further: the search passed its budget of {budget} variant audits "
                f"({len(report.variants)} variants per candidate fix); `tito-audit patch` searches it without a budget"
            )
        spent += variants
        return run_audit(loaded, settings)

    return run


def explain(report: AuditReport, loaded: LoadedModel) -> None:
    """The template lines behind each cause's first example, for the published pages; a model whose explanation
    fails keeps its row (the report says why instead)."""
    from tito_audit.formatters.fix_report import MAX_DIFF_LINE
    from tito_audit.repair.explanations import attach_explanations, clip_lines

    try:
        attach_explanations(report, loaded)
        clip_lines(report, MAX_DIFF_LINE)
    except Exception as exc:
        report.explanations.clear()
        report.notes.append(f"explanations unavailable: {type(exc).__name__}: {exc}")


def real_data_of(combined: AuditReport) -> RealData:
    causes: Counter[str] = Counter()
    for variant in combined.variants:
        causes.update(variant.checks["rollout"].cause_counts)
    ranked = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))
    return RealData(combined.verdict, ", ".join(cause for cause, _ in ranked))
