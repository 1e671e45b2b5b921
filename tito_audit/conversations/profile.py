"""What the generator must know about the audited template to write conversations a model behind it could produce.

The audit reads these from the template and the engine's parser (:mod:`tito_audit.audit.generation`) and hands
them to the generator: the reasoning forms the generation prompt admits, the call-id form the model writes, the
tools, the text a model never samples in its own turn (the reasoning closer, the control tokens), and whether the
template renders a ``developer`` message. Two variants with the same profile audit the same conversations.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from tito_audit.conversations.call_ids import OPENAI, CallIdForm
from tito_audit.conversations.stress import STRESS_TEXTS
from tito_audit.conversations.tools import ToolSet, built_in_tools

SAMPLED_STRESS = tuple(name for name in STRESS_TEXTS if name != "markup-lookalike")
"""Stress texts a model may write in its own turn: everything but look-alike markup (pasted text is real in user,
system and tool messages; a model that samples ``</think>`` has ended its reasoning)."""


@dataclass(frozen=True)
class GenerationProfile:
    """See the module docstring; the defaults describe no template in particular (every reasoning form, OpenAI ids,
    the built-in tools)."""

    reasoning: tuple[str, ...] | None = None
    """The reasoning kinds (``absent``, ``empty``, ``present``) a model can produce after the variant's prompt;
    None: every kind."""
    prompt_opens_reasoning: bool = False
    """The generation prompt ends inside an open reasoning block: a turn drawn without reasoning is one whose model
    closed the block at once and whose harness sent the empty reasoning back absent or None."""
    call_ids: CallIdForm = OPENAI
    model_writes_ids: bool = False
    """The template writes call ids into the model's own turn, so the model wrote them (a harness cannot reuse
    them); otherwise the engine gives them and a harness may send one back again in a later turn."""
    tools: ToolSet = field(default_factory=built_in_tools)
    unsampled: tuple[str, ...] = ()
    """Text a model never writes in its own turn (reasoning, content, arguments)."""
    developer: bool = False
    """The template renders a ``developer`` message (some conversations then lead with one)."""
    text_before_calls: float | None = None
    """Where the family's model writes text before each call by habit (the registry's ``model_habits``): the share
    of call turns drawn without any (no reasoning, no content), its rare form; None: no such habit, every form is
    drawn as the grid says."""

    def key(self) -> tuple:
        """What identifies the conversations this profile gives (the cache key of a variant's conversations)."""
        return (
            self.reasoning,
            self.prompt_opens_reasoning,
            self.call_ids.name,
            self.model_writes_ids,
            self.tools.key,
            self.unsampled,
            self.developer,
            self.text_before_calls,
        )

    def sampled_text(self, text: str) -> bool:
        """Whether a model could write ``text`` in its own turn."""
        return not any(token and token in text for token in self.unsampled)

    def pick_sampled(self, rng: random.Random, choices: Sequence[str]) -> str:
        """One of ``choices`` a model could write (the draw is made first, so it does not depend on the filter;
        a choice it could not write is replaced by the first one it could)."""
        chosen = rng.choice(list(choices))
        if self.sampled_text(chosen):
            return chosen
        return next((c for c in choices if self.sampled_text(c)), "")


DEFAULT_PROFILE = GenerationProfile()
