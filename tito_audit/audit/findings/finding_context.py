"""What a finding reads: the variant's machinery and the audited conversations (see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tito_audit.audit.results import Finding
from tito_audit.conversations.conversation import Conversation
from tito_audit.model.load_folder import LoadedModel
from tito_audit.model.render import Renderer
from tito_audit.model.tokens import TokenCodec


@dataclass(frozen=True)
class FindingContext:
    model: LoadedModel
    codec: TokenCodec
    renderer: Renderer
    clock: datetime
    accepted: Sequence[tuple[Conversation, str]]
    """Audited conversations with ``render(M)`` (as rendered during the audit, under ``clock``)."""
    completions: int
    gen_prompt_mismatches: int


@dataclass(frozen=True)
class FindingRule:
    name: str
    find: Callable[[FindingContext], list[Finding]]
