"""The settings of one audit, and the conversations they select for each variant."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tito_audit.conversations.conversation import Conversation
from tito_audit.conversations.generate import DEFAULT_MAX_TURNS, generate
from tito_audit.conversations.profile import GenerationProfile
from tito_audit.conversations.tools import ToolSet, built_in_tools
from tito_audit.conversations.validate import validate_conversations
from tito_audit.conversations.windows import DEFAULT_MAX_MESSAGES, windowed
from tito_audit.model.render_guard import DEFAULT_CLOCK, RenderLimits

DEFAULT_COUNT = 96

ProgressCallback = Callable[[str, int, int], None]
"""(variant name, conversations done, conversations in all)."""
ConversationSource = Callable[[GenerationProfile], list[Conversation]]
"""The conversations to audit for a variant, given what a model behind its template writes (the reasoning forms its
prompt admits, the call-id form, the tools)."""


@dataclass
class AuditOptions:
    seed: int = 0
    count: int = DEFAULT_COUNT
    max_turns: int = DEFAULT_MAX_TURNS
    pinned_kwargs: dict[str, Any] = field(default_factory=dict)
    clock: datetime = DEFAULT_CLOCK
    extra_stop_tokens: list[str] = field(default_factory=list)
    max_examples_per_group: int | None = None
    """Keep only this many failures per (check, aspect, category, causes) group; None keeps all."""
    conversations: Sequence[Conversation] | None = None
    """Conversations to audit instead of generated ones (the seam for real trajectories)."""
    with_generated: bool = False
    """With ``conversations``: audit the generated conversations too (first)."""
    conversations_source: str = "generated"
    datasets: list[dict[str, Any]] = field(default_factory=list)
    limits: RenderLimits = field(default_factory=RenderLimits)
    max_messages: int | None = DEFAULT_MAX_MESSAGES
    """Given conversations longer than this are audited over a window of their first turns
    (:mod:`tito_audit.conversations.windows`); None or 0 audits them whole."""
    tools: ToolSet = field(default_factory=built_in_tools)
    """The tools generated conversations declare and call: the built-in set, or the user's (``--tools``)."""
    parser: Any = "template"
    """The parsers between each completion and the next prompt (:mod:`tito_audit.parse.choice`): ``template`` (the
    perfect inverse, no parse), ``auto`` (each engine whose parsers for the model are recorded and installed), an
    engine's name (``sglang``), ``hf`` or ``[ENGINE:]TOOL[,REASONING]``, a parser object
    (:class:`~tito_audit.parse.parser.CompletionParser`), or a list of those: one verdict with each. The command
    line's default is ``auto``."""

    @property
    def generates(self) -> bool:
        """Whether generated conversations are audited (alone or beside given ones)."""
        return self.conversations is None or self.with_generated


def conversation_source(options: AuditOptions) -> ConversationSource:
    """The conversations to audit for a variant, given its generation profile: the given ones as they are, or the
    generated ones drawn for that profile (generated once per distinct profile)."""
    given = list(options.conversations) if options.conversations is not None else None
    if given is not None:
        validate_conversations(given)
        given = windowed(given, options.max_messages)
    generated: dict[tuple, list[Conversation]] = {}

    def for_profile(profile: GenerationProfile) -> list[Conversation]:
        if given is not None and not options.with_generated:
            return given
        key = profile.key()
        if key not in generated:
            drawn = list(generate(options.count, options.seed, options.max_turns, profile))
            generated[key] = drawn + (given or [])
        return generated[key]

    return for_profile
