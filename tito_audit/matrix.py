"""The compatibility matrix: audit many models in worker processes, one isolated row per model.

Each model is resolved, loaded and audited inside a worker; its per-model JSON and Markdown reports
are written there and only the flat row comes back, so a model's tokenizer is released as soon as its
row is written. A model that cannot be resolved, loaded or audited gets a row that says why; the others
go on.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tito_audit.errors import AuditError, ResolutionError
from tito_audit.generate import DEFAULT_MAX_TURNS
from tito_audit.matrix_row import AUDIT_ERROR, FAILED_TO_LOAD, NOT_REACHABLE, add_combined, base_row, row_from_report
from tito_audit.registry import family_of
from tito_audit.resolve import folder_name

MATRIX_EXAMPLES_PER_GROUP = 3
"""Failures kept per group in published per-model reports (counts stay complete)."""


@dataclass
class MatrixOptions:
    out_dir: Path
    mirrors: list[Path] = field(default_factory=list)
    cache_dir: Path | None = None
    allow_hub: bool = True
    seed: int = 0
    count: int = 96
    max_turns: int = DEFAULT_MAX_TURNS
    jobs: int = 1
    examples_per_group: int | None = MATRIX_EXAMPLES_PER_GROUP
    conversation_sources: list[str] = field(default_factory=list)
    """Real trajectories for the combined audit (generated + real), the matrix's own column; full audits only
    (template-only rows say n/a: the column is about real token traffic)."""
    conversations_limit: int | None = None

    def settings_record(self, models: str | list[str]) -> dict[str, Any]:
        """What ``reports/matrix_settings.json`` records, so that the matrix can be regenerated as it was
        (``models``: ``"registry"`` or the ids given)."""
        return {
            "models": models,
            "mirrors": [str(m) for m in self.mirrors],
            "hub": self.allow_hub,
            "seed": self.seed,
            "count": self.count,
            "max_turns": self.max_turns,
            "conversations": list(self.conversation_sources),
            "conversations_limit": self.conversations_limit,
        }


_REAL_CONVERSATIONS: dict[tuple, list] = {}


def _real_conversations(options: MatrixOptions) -> list:
    """The real trajectories, loaded once per worker process."""
    from tito_audit.datasources import load_conversations

    key = (tuple(options.conversation_sources), options.conversations_limit)
    if key not in _REAL_CONVERSATIONS:
        loaded = []
        for source in options.conversation_sources:
            loaded += load_conversations(source, limit=options.conversations_limit).conversations
        _REAL_CONVERSATIONS[key] = loaded
    return _REAL_CONVERSATIONS[key]


ProgressEvent = tuple[str, str, int, int]
"""(model id, stage or variant, done, total)."""


def report_stem(model_id: str) -> str:
    return folder_name(model_id)


def audit_one(model_id: str, options: MatrixOptions, events: Any = None) -> dict[str, Any]:
    """Resolve, load and audit one model; write its reports; return its row. Never raises."""
    from tito_audit.formatters import fix_report
    from tito_audit.formatters.json_report import write_json
    from tito_audit.formatters.markdown import write_markdown
    from tito_audit.model import load_model
    from tito_audit.resolve import resolve_model
    from tito_audit.service import AuditOptions, audit
    from tito_audit.way_out import find_way_out, needs_way_out

    def emit(stage: str, done: int, total: int) -> None:
        if events is not None:
            events.put((model_id, stage, done, total))

    started = time.monotonic()
    emit("resolving", 0, 1)
    try:
        resolved = resolve_model(
            model_id, mirrors=options.mirrors, cache_dir=options.cache_dir, allow_hub=options.allow_hub
        )
    except ResolutionError as exc:
        return base_row(model_id, NOT_REACHABLE, str(exc))
    family = family_of(model_id)
    try:
        loaded = load_model(resolved, special_token_defaults=family.special_tokens if family else None)
    except AuditError as exc:
        return base_row(model_id, FAILED_TO_LOAD, str(exc))
    except Exception as exc:  # a broken tokenizer folder must not stop the matrix
        return base_row(model_id, FAILED_TO_LOAD, f"{type(exc).__name__}: {exc}")
    settings = AuditOptions(
        seed=options.seed,
        count=options.count,
        max_turns=options.max_turns,
        max_examples_per_group=options.examples_per_group,
    )
    try:
        report = audit(loaded, settings, progress=lambda variant, done, total: emit(variant, done, total))
        stem = report_stem(model_id)
        write_json(report, options.out_dir / "models" / f"{stem}.json")
        write_markdown(report, options.out_dir / "models" / f"{stem}.md")
        row = row_from_report(report, f"models/{stem}.md", time.monotonic() - started)
        if needs_way_out(report):
            emit("way out", 0, 1)
            way = find_way_out(loaded, report, settings, audit)
            fix_report.write(report, fix_report.page_of(way, report), options.out_dir / "fixes", stem)
            row.update(way_out=way.summary, fix_report=f"fixes/{stem}.md")
        if options.conversation_sources and report.text_level_only:
            row["verdict_with_real_data"] = "n/a (text level)"
        elif options.conversation_sources:
            emit("real conversations", 0, 1)
            combined = audit(
                loaded,
                replace(
                    settings,
                    conversations=_real_conversations(options),
                    with_generated=True,
                    conversations_source="generated + " + ", ".join(Path(s).name for s in options.conversation_sources),
                ),
            )
            add_combined(row, combined)
            row["duration_seconds"] = round(time.monotonic() - started, 2)
    except Exception as exc:
        row = base_row(model_id, AUDIT_ERROR, f"{type(exc).__name__}: {exc}")
    finally:
        del loaded
        gc.collect()
    return row


def _worker_init() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def run_matrix(
    models: Sequence[str],
    options: MatrixOptions,
    on_event: Callable[[ProgressEvent], None] | None = None,
) -> list[dict[str, Any]]:
    """Rows for ``models`` (sorted by model id), audited ``options.jobs`` at a time."""
    ordered = sorted(dict.fromkeys(models), key=str.lower)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    if options.jobs <= 1:
        events: queue.Queue[ProgressEvent] = queue.Queue()
        rows = []
        for model_id in ordered:
            rows.append(audit_one(model_id, options, events))
            _drain(events, on_event)
            if on_event is not None:
                on_event((model_id, "done", 1, 1))
        return rows
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        shared_events = manager.Queue()
        rows_by_model: dict[str, dict[str, Any]] = {}
        with ProcessPoolExecutor(max_workers=options.jobs, mp_context=context, initializer=_worker_init) as pool:
            futures: dict[Future, str] = {
                pool.submit(audit_one, model_id, options, shared_events): model_id for model_id in ordered
            }
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(shared_events, on_event)
                for future in done:
                    model_id = futures[future]
                    try:
                        rows_by_model[model_id] = future.result()
                    except Exception as exc:  # the worker process itself died
                        rows_by_model[model_id] = base_row(model_id, AUDIT_ERROR, f"worker failed: {exc}")
                    if on_event is not None:
                        on_event((model_id, "done", 1, 1))
            _drain(shared_events, on_event)
    return [rows_by_model[model_id] for model_id in ordered]


def _drain(events: Any, on_event: Callable[[ProgressEvent], None] | None) -> None:
    while True:
        try:
            event = events.get_nowait()
        except (queue.Empty, EOFError, OSError):
            return
        if on_event is not None:
            on_event(event)
