"""The model's verdict with one engine's parsers, as the report keeps it (a part of :mod:`.results`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tito_audit.audit.result_conditions import Conditions


@dataclass
class EngineVerdict:
    """The model's verdict with one engine's parsers (docs/contract.md "Engines differ"): what a re-rendering loop
    behind that engine sees, summed over the variants' :class:`ParseResult` of that engine."""

    engine: str
    """``sglang``, ``vllm``; "" for transformers' parser (``hf``) or a caller's own."""
    parser: str
    """The parsers, as reports name them (``sglang qwen25+qwen3``)."""
    tool: str | None
    """The engine's tool-call parser (``--tool-call-parser``), None for none."""
    reasoning: str | None
    """The engine's reasoning parser (``--reasoning-parser``), None for none."""
    why: str
    """Why these parsers: ``default: the SGLang parsers documented for …``, ``asked for by name``, …"""
    source: str
    """Where the registry read that the model's engine runs these parsers."""
    verdict: str
    """The model's verdict with these parsers: its worst variant's."""
    verdict_reason: str
    """That variant's reason (prefixed with its name when the template has several variants)."""
    causes: dict[str, int] = field(default_factory=dict)
    """Failing steps of the rollout with these parsers per cause, over every variant."""
    fields: dict[str, int] = field(default_factory=dict)
    """``parse-lossy`` steps per field the parse changed (``content whitespace``, ``call lost``, …), every variant."""
    way_out: str | None = None
    """When these parsers make the verdict worse than the perfect inverse's: the bridging mode that holds whatever
    the parser returns."""
    conditions: Conditions | None = None
    """When this verdict breaks: the plain loop's verdict with these parsers and the forms, shapes and settings
    whose steps fail (:func:`tito_audit.audit.conditions.verdict_conditions.report_conditions` over this engine's parse
    results)."""
