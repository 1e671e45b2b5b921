"""The settings of one matrix run (shared by the driver, the workers and the results key)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.conversations.generate import DEFAULT_MAX_TURNS

MATRIX_EXAMPLES_PER_GROUP = 3
"""Failures kept per group in published per-model reports (counts stay complete)."""

DEFAULT_AUDIT_SECONDS = 900.0
"""``--audit-seconds``: CPU seconds; the costliest pair of the published matrix (its way-out search included) takes
a few minutes of CPU time."""

LOCAL = "local"
RAY = "ray"
BACKENDS = (LOCAL, RAY)


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
    results_cache: Path | None = None
    """Folder of the content-addressed results (see :mod:`tito_audit.matrix.store`); None keeps results in
    memory for this run only (identical pairs are still audited once)."""
    way_out_budget: int | None = None
    """Variant audits the way-out search may run per pair (None: no limit); past it the row says so (the corpus
    sets one: a template with many variants would otherwise cost minutes)."""
    backend: str = LOCAL
    """``local`` (worker processes on this machine) or ``ray`` (tasks on a local or existing Ray cluster)."""
    parser: str = "auto"
    """The parsers of the "with …'s parser" columns (:mod:`tito_audit.parse.choice`; ``auto``: every engine whose
    documented parsers for the model are installed, a column each)."""
    audit_seconds: float = DEFAULT_AUDIT_SECONDS
    """CPU-time limit of one pair's audit in a worker process (0: none): the work the audit does, not the wall clock,
    so that a busy machine does not end an honest audit that is only slow; past it the worker is ended and replaced
    and the row keeps its previous result with a note (:mod:`tito_audit.matrix.publish`). Not part of the results key
    (a result that finished is the same whatever the limit)."""

    def settings_record(self, models: str | list[str]) -> dict[str, Any]:
        """What ``reports/matrix_settings.json`` records, so that the matrix can be regenerated as it was
        (``models``: ``"registry"`` or the ids given). Where and how it ran (cache, backend) is left out: it
        does not change the result."""
        return {
            "models": models,
            "mirrors": [str(m) for m in self.mirrors],
            "hub": self.allow_hub,
            "seed": self.seed,
            "count": self.count,
            "max_turns": self.max_turns,
            "conversations": list(self.conversation_sources),
            "conversations_limit": self.conversations_limit,
            "parser": self.parser,
        }
