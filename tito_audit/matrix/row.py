"""One matrix row per model: the audit report summarised into flat, table-friendly fields."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from typing import TypedDict, cast

from tito_audit.audit.core.causes import QUIET
from tito_audit.audit.results import AuditReport, worst_verdict
from tito_audit.conversations.conversation import STEP_KINDS
from tito_audit.formatters.conditions_lines import conditions_line
from tito_audit.formatters.mask_lines import mask_cell
from tito_audit.formatters.results_table import AUDITED
from tito_audit.formatters.site.glossary import NOT_AUDITED
from tito_audit.model.registry import family_of
from tito_audit.parse import engines
from tito_audit.parse.choice import by_format_marker, needs_tokenizer_prefix, not_installed_prefix, refused_prefix
from tito_audit.parse.interface import Engine

NOT_REACHABLE = "not audited: not reachable"
FAILED_TO_LOAD = "not audited: failed to load"
AUDIT_ERROR = "not audited: audit error"
KEPT = "kept from the previous run: "
"""How the reason of a row begins whose audit failed in this run and which shows the result published before
(:mod:`tito_audit.matrix.publish`): a failed audit never takes a published result away."""


def failed_in_this_run(row: MatrixRow) -> bool:
    """Whether the row's audit failed in this run: ``not audited: audit error``, or its previous result kept."""
    return row["status"] == AUDIT_ERROR or (row.get("reason") or "").startswith(KEPT)


ENGINE_PARTS = ("verdict", "conditions", "parser", "way_out")


def engine_columns() -> tuple[str, ...]:
    """Four columns per engine (:data:`~tito_audit.parse.engines.ENGINES`, in order): ``<engine>_verdict`` (the
    model's verdict with that engine's documented parsers), ``<engine>_conditions`` (when that verdict breaks, as
    ``conditions`` says it for the perfect inverse), ``<engine>_parser`` (those parsers, or why there is no verdict
    with them) and ``<engine>_way_out`` (the bridging mode that holds when they make the verdict worse)."""
    return tuple(f"{engine.name}_{part}" for engine in engines.ENGINES for part in ENGINE_PARTS)


COLUMNS = (
    "model_id",
    "family",
    "status",
    "reason",
    "same_as",
    "audit_level",
    "stop_tokens",
    "verdict",
    "conditions",
    *engine_columns(),
    "written_values",
    "variant_verdicts",
    *(f"rollout_{kind}" for kind in STEP_KINDS),
    *(f"append_{kind}" for kind in STEP_KINDS),
    "main_causes",
    "way_out",
    "fix_report",
    "verdict_with_real_data",
    "real_data_causes",
    "roundtrip_findings",
    "bridge",
    "mask",
    "drift",
    "findings",
    "refused_shapes",
    "report",
    "source",
    "location",
    "revision",
    "backend",
    "tokenizer_sha256",
    "template_sha256",
    "results_key",
    "seed",
    "count",
    "tool_version",
    "library_versions",
    "generated_at",
    "duration_seconds",
)
VOLATILE_COLUMNS = ("generated_at", "duration_seconds")
"""The only columns that change between two runs with the same code, models, settings and seed."""

CONDITIONS_SHOWN = 3
"""Conditions a matrix cell names (the rest counted); the model's page names them all."""


class MatrixRow(TypedDict):
    """A curated matrix row: one model id, its columns in :data:`COLUMNS` order (a test holds the two equal, the
    engines' columns aside). Every
    column is text except ``seed``, ``count`` (None on a row that was not audited) and ``duration_seconds``. The
    engines' four text columns each (:func:`engine_columns`, named from :data:`~tito_audit.parse.engines.ENGINES`)
    are not typed one by one, so that another engine is no edit here: they are read and written by their computed
    names through :func:`cell` and :func:`set_cells`, as the step-kind columns named from
    :data:`~tito_audit.conversations.conversation.STEP_KINDS` are."""

    model_id: str
    family: str
    status: str
    reason: str
    same_as: str
    audit_level: str
    stop_tokens: str
    verdict: str
    conditions: str
    written_values: str
    variant_verdicts: str
    rollout_tool: str
    rollout_user: str
    rollout_system: str
    rollout_assistant: str
    append_tool: str
    append_user: str
    append_system: str
    append_assistant: str
    main_causes: str
    way_out: str
    fix_report: str
    verdict_with_real_data: str
    real_data_causes: str
    roundtrip_findings: str
    bridge: str
    mask: str
    drift: str
    findings: str
    refused_shapes: str
    report: str
    source: str
    location: str
    revision: str
    backend: str
    tokenizer_sha256: str
    template_sha256: str
    results_key: str
    seed: int | None
    count: int | None
    tool_version: str
    library_versions: str
    generated_at: str
    duration_seconds: float | None


def cell(row: Mapping[str, object], column: str) -> object:
    """The value of a column picked by a computed name (``f"{engine.name}_verdict"``), None when the row has none;
    a literal name reads the typed key itself."""
    return row.get(column)


def set_cells(row: MatrixRow, cells: Mapping[str, object]) -> None:
    """Write columns picked by computed names (the engine and step-kind columns) into ``row``."""
    unknown = set(cells) - set(COLUMNS)
    if unknown:
        raise KeyError(f"not matrix columns: {sorted(unknown)}")
    cast("dict[str, object]", row).update(cells)


def base_row(model_id: str, status: str, reason: str = "") -> MatrixRow:
    family = family_of(model_id)
    row = cast(MatrixRow, dict.fromkeys(COLUMNS, ""))
    row.update({"model_id": model_id, "family": family.family if family else "", "status": status, "reason": reason})
    row.update({"seed": None, "count": None, "duration_seconds": None})
    return row


def tokenizer_digest(file_sha256: dict[str, str]) -> str:
    """One digest over every tokenizer/template/config file's sha256 (sorted by name)."""
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(file_sha256.items()))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def _kind_status(report: AuditReport, check: str, kind: str) -> str:
    """``stable``/``unstable``/``refused``/``n/a`` for a step kind (rollout) or appended role (append), all variants."""
    cases = failed = refused = 0
    for variant in report.variants:
        for row in variant.checks[check].rows:
            if row.category == kind or row.category.startswith(f"{kind} after "):
                cases += row.cases
                failed += row.failed
                refused += row.refused
    if cases == 0:
        return "n/a"
    if failed:
        return "unstable"
    return "refused" if refused == cases else "stable"


def level_cell(report: AuditReport) -> str:
    """``full``, ``text-level only``, or for an engine-rendered model ``full, rendered by vLLM's DeepSeek V4 encoder
    (no Jinja template)``: the row says what rendered it when no template did."""
    if report.text_level_only:
        return "text-level only"
    return f"full, {report.model.rendered_by}" if report.model.rendered_by else "full"


UNKNOWN_STOPS = "unknown"

BY_FORMAT = ", by its template's call format"
"""What the parser column adds when no document of the engine names parsers for the model and the registry records
the pair whose call format the template asks for (``vllm hermes, by its template's call format``)."""


def stop_tokens_cell(report: AuditReport) -> str:
    """The stop tokens of every variant (their texts), or ``unknown`` when some variant has none."""
    if any(not variant.stop_tokens for variant in report.variants):
        return UNKNOWN_STOPS
    return " ".join(sorted({s.text for variant in report.variants for s in variant.stop_tokens}))


def engine_cells(report: AuditReport, engine: Engine) -> dict[str, str]:
    """The columns of ``engine``: its parser verdict, when that verdict breaks, its parsers (``sglang qwen25+qwen3``,
    or why there is no verdict with them: ``not installed``, ``no tokenizer here``, ``refused by the parser``,
    ``none recorded``) and its way out when its parser makes things worse."""
    audited = next((verdict for verdict in report.parsers if verdict.engine == engine.name), None)
    if audited is not None:
        parser = audited.parser + (BY_FORMAT if by_format_marker(engine) in audited.why else "")
    elif any(note.startswith(not_installed_prefix(engine)) for note in report.notes):
        parser = "not installed"
    elif any(note.startswith(needs_tokenizer_prefix(engine)) for note in report.notes):
        parser = "no tokenizer here"
    elif any(note.startswith(refused_prefix(engine)) for note in report.notes):
        parser = "refused by the parser"
    else:
        parser = "none recorded"
    return {
        f"{engine.name}_verdict": audited.verdict if audited is not None else "",
        f"{engine.name}_conditions": (
            conditions_line(audited.conditions, limit=CONDITIONS_SHOWN) if audited is not None else ""
        ),
        f"{engine.name}_parser": parser,
        f"{engine.name}_way_out": (audited.way_out or "") if audited is not None else "",
    }


def written_values_cell(report: AuditReport) -> str:
    """``boolean 6/6, null 5/5; read back as another value: null 29/29; rewritten by vllm qwen3_xml: number 10/10``:
    over every variant, per value type, the tool steps whose next prompt no longer continues a JSON literal the model
    wrote (value-rewritten), the values the parser read back as other values, then per engine's parser the steps
    after a value it rewrote that the rewrite broke; empty when none of these happened."""
    rewritten: dict[str, list[int]] = {}
    changed: dict[str, list[int]] = {}
    by_parser: dict[str, dict[str, list[int]]] = {}
    for variant in report.variants:
        for parse in variant.parses:
            for found in parse.rewritten_values:
                if found.differing:
                    tally = by_parser.setdefault(parse.parser, {}).setdefault(found.value_type, [0, 0])
                    tally[0] += found.differing
                    tally[1] += found.steps
        for value in variant.values:
            if value.steps:
                tally = rewritten.setdefault(value.value_type, [0, 0])
                tally[0] += value.differing
                tally[1] += value.steps
            if value.values_changed:
                tally = changed.setdefault(value.value_type, [0, 0])
                tally[0] += value.values_changed
                tally[1] += value.values
    parts = ", ".join(f"{kind} {n}/{d}" for kind, (n, d) in rewritten.items() if n)
    back = ", ".join(f"{kind} {n}/{d}" for kind, (n, d) in changed.items())
    parsers = [
        f"rewritten by {parser}: " + ", ".join(f"{kind} {n}/{d}" for kind, (n, d) in sorted(kinds.items()))
        for parser, kinds in by_parser.items()
    ]
    return "; ".join(filter(None, [parts, f"read back as another value: {back}" if back else "", *parsers]))


def row_from_report(report: AuditReport, report_link: str, duration: float) -> MatrixRow:
    row = base_row(report.model.model_id, AUDITED)
    rollout_causes: Counter[str] = Counter()
    roundtrip: set[str] = set()
    bridge_cases = bridge_failed = 0
    findings: set[str] = set()
    refused: Counter[str] = Counter()
    drift_steps = drift_failed = mismatched = total = 0
    for variant in report.variants:
        rollout_causes.update(variant.checks["rollout"].cause_counts)
        roundtrip.update(set(variant.checks["roundtrip"].cause_counts) - QUIET)
        for bridge_row in variant.checks["bridge"].rows:
            bridge_cases += bridge_row.cases - bridge_row.refused
            bridge_failed += bridge_row.failed
        findings.update(f.cause for f in variant.findings)
        for shape in variant.refused:
            refused[shape.reason] += shape.count
        drift_steps += variant.drift.steps
        drift_failed += variant.drift.canonical_drift_steps
        mismatched += variant.drift.mismatched_tokens
        total += variant.drift.total_tokens
    row.update(
        {
            "audit_level": level_cell(report),
            "stop_tokens": stop_tokens_cell(report),
            "verdict": worst_verdict([v.verdict for v in report.variants]),
            "written_values": written_values_cell(report),
            "conditions": conditions_line(report.conditions, limit=CONDITIONS_SHOWN),
            "variant_verdicts": "; ".join(
                [f"{v.name}: {v.verdict}" for v in report.variants]
                + [f"{item.setting}: refused setting" for item in report.refused_settings]
            ),
            "main_causes": ", ".join(
                cause for cause, _ in sorted(rollout_causes.items(), key=lambda kv: (-kv[1], kv[0]))
            ),
            "roundtrip_findings": ", ".join(sorted(roundtrip)) if not report.text_level_only else "n/a (text level)",
            "bridge": f"{bridge_cases - bridge_failed}/{bridge_cases} equal" if bridge_cases else "n/a",
            "mask": mask_cell(report),
            "drift": f"{drift_failed}/{drift_steps} steps; {mismatched}/{total} tokens"
            if drift_steps and not report.text_level_only
            else "n/a",
            "findings": ", ".join(sorted(findings)),
            "refused_shapes": "; ".join(
                f"{count}× {reason}" for reason, count in sorted(refused.items(), key=lambda kv: -kv[1])
            ),
            "report": report_link,
            "source": report.model.source,
            "location": report.model.path,
            "revision": report.model.revision or "",
            "backend": report.model.backend,
            "tokenizer_sha256": tokenizer_digest(report.model.file_sha256),
            "template_sha256": report.model.template_sha256 or "",
            "seed": report.settings.seed,
            "count": report.settings.count,
            "tool_version": report.tool_version,
            "library_versions": ", ".join(f"{k} {v}" for k, v in sorted(report.library_versions.items())),
            "generated_at": report.generated_at,
            "duration_seconds": round(duration, 2),
        }
    )
    for engine in engines.ENGINES:
        set_cells(row, engine_cells(report, engine))
    for kind in STEP_KINDS:
        set_cells(
            row,
            {
                f"rollout_{kind}": _kind_status(report, "rollout", kind),
                f"append_{kind}": _kind_status(report, "append", kind),
            },
        )
    return row


def add_combined(row: MatrixRow, verdict: str, causes: str) -> None:
    """The combined audit (generated + real trajectories): its verdict and the causes it found."""
    row["verdict_with_real_data"] = verdict
    row["real_data_causes"] = causes


def conditions_cell(row: MatrixRow) -> str:
    """When the row's verdicts break: the perfect inverse's conditions, then each engine's parser's (``with SGLang's
    parser: plain loop ready; breaks when …``; each where its verdict is worse than ready)."""
    parts = [row.get("conditions") or ""]
    for engine in engines.ENGINES:
        if conditions := cell(row, f"{engine.name}_conditions"):
            parts.append(f"with {engine.label}'s parser: {conditions}")
    return " · ".join(part for part in parts if part)


class Verdicted(TypedDict):
    """The columns :func:`verdict_of` reads, which a matrix row and a corpus row share."""

    status: str
    verdict: str


def verdict_of(row: Verdicted) -> str:
    """A row's verdict, or ``not audited`` for the rows without one."""
    return row["verdict"] if row.get("status") == AUDITED and row.get("verdict") else NOT_AUDITED
