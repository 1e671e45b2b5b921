"""What ``tito-audit serve`` takes: the gateway's settings (see its ``--help`` and docs/gateway.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.gateway.memory_budget import DEFAULT_SESSION_BYTES, DEFAULT_TOTAL_BYTES
from tito_audit.model.render import RenderLimits
from tito_audit.parse.parser import CompletionParser


@dataclass
class GatewayConfig:
    """What ``tito-audit serve`` takes (see its ``--help``)."""

    model: str
    engine: str = "fake"
    engine_api: str = "vllm"
    parser: str | CompletionParser = "auto"
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    session_idle: float = 900.0
    max_sessions: int = 1024
    on_break: str = "warn"
    bridge: str = "auto"
    engine_timeout: float = 300.0
    max_request_bytes: int = 8 * 1024 * 1024
    seed: int = 0
    engine_model: str | None = None
    """The model name the engine serves (vLLM checks it); default: the model's id."""
    max_tokens: int = 2048
    """``max_tokens`` sent when a request names none (vLLM's completions default to 16, SGLang's to 128)."""
    max_render_chars: int = RenderLimits.max_chars
    """A render longer than this is refused (413 ``render_too_long``)."""
    max_render_seconds: float = RenderLimits.max_seconds
    """A render that takes longer is stopped and refused (422 ``render_timeout``)."""
    max_render_bytes: int = RenderLimits.max_bytes
    """A render whose strings and lists would take more memory in all is refused (413 ``render_too_large``)."""
    max_session_bytes: int = DEFAULT_SESSION_BYTES
    """A request that would bring its session past this (estimated) is refused (413 ``session_too_large``)."""
    max_total_bytes: int = DEFAULT_TOTAL_BYTES
    """A request that would bring all sessions together past this is refused (507 ``insufficient_storage``)."""
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    stop_tokens: Sequence[str] = ()
    mirrors: Sequence[str | Path] = ()
    cache_dir: str | Path | None = None
    revision: str | None = None
    allow_hub: bool = True
    trust_remote_code: bool = False
    template: str | Path | None = None
    template_name: str | None = None
    on_rewrite: str | None = None
    """``branch`` (a request whose history differs from the session's opens a new branch, kept as a training sample)
    or ``refuse`` (400); None: ``branch``, or ``refuse`` with ``store`` (whose sessions only append)."""
    match: str = "strict"
    """What counts as the same message: ``strict``, ``tool-call-format`` or ``role-content`` (:mod:`.matchers`)."""
    store: str | Path | None = None
    """A SQLite file that keeps the sessions across restarts (:mod:`.sqlite_journal`); None: memory only."""
    engine_deadline: float = 1800.0
    """Seconds an engine's whole turn may take, streamed or not (504 past it; ``--engine-timeout`` bounds each wait)."""
    max_model_len: int | None = None
    """The context the engine serves the model with (vLLM's ``--max-model-len``); None: as the model's config says."""

    @property
    def rewrites(self) -> str:
        """``--on-rewrite`` as it applies (see :attr:`on_rewrite`)."""
        if self.on_rewrite is not None:
            return self.on_rewrite
        return "refuse" if self.store is not None else "branch"
