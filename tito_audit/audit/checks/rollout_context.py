"""The rollout context: what every check of one conversation reads, built once per conversation.

It holds the variant's machinery (renderer, codec, stop tokens), the accepted conversation with its renders
and the alignment of each assistant turn (:mod:`tito_audit.audit.realization.realize`), and, computed on first use, the
simulated rollout itself (:class:`~tito_audit.audit.checks.trace.RolloutTrace`): the buffer, the sampled
completions and each appended step. Checks read it; none of them renders or simulates on its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from tito_audit.audit.core.causes import TextContext
from tito_audit.audit.realization.realize import TurnAlignment
from tito_audit.conversations.conversation import Conversation
from tito_audit.model.render import RenderedPrefix, Renderer, RenderError
from tito_audit.model.threads import cached_property
from tito_audit.model.tokens import TokenCodec

Key = tuple[int, bool]
_MISSING = object()


@dataclass
class CheckSetup:
    """One variant's machinery, shared by the contexts of all its conversations."""

    renderer: Renderer
    codec: TokenCodec
    stop_ids: frozenset[int]
    seed: int
    text_only: bool = False
    """The tokenizer is a stand-in (no vocabulary): only text-level results are made."""
    end_id: int | None = None
    """The stop token the model samples to end a turn whose rendering holds none (its end-of-sequence token, from
    the generation config, the tokenizer or the registry; see
    :func:`tito_audit.audit.realization.stops.model_end_token`)."""
    rare_form: str | None = None
    """Where the family's model writes text before each call by habit: the words of the rare form, a call turn
    without any (tagged on the steps after such turns: :mod:`tito_audit.audit.conditions.step_conditions`)."""
    stop_texts: tuple[str, ...] = field(init=False)
    _texts: dict[int, str] = field(init=False, default_factory=dict, repr=False)
    """Each token's text, decoded once (failure windows decode the same few hundred tokens again and again);
    bounded by the vocabulary."""

    def __post_init__(self) -> None:
        self.stop_texts = tuple(self.codec.decode([i]) for i in sorted(self.stop_ids))

    @classmethod
    def create(
        cls,
        renderer: Renderer,
        codec: TokenCodec,
        stop_ids: Sequence[int],
        seed: int,
        text_only: bool = False,
        end_id: int | None = None,
        rare_form: str | None = None,
    ) -> CheckSetup:
        return cls(renderer, codec, frozenset(stop_ids), seed, text_only, end_id, rare_form)

    @cached_property
    def controls(self) -> tuple[str, ...]:
        """The control tokens the template writes, and the stop tokens (a model's end token the template never
        writes is a control token all the same where the buffer holds it)."""
        written = self.codec.written_controls
        return (*written, *(t for t in self.stop_texts if t and t not in written))

    @cached_property
    def control_pattern(self) -> re.Pattern[str] | None:
        if len(self.controls) == len(self.codec.written_controls):
            return self.codec.written_control_pattern
        texts = sorted(self.controls, key=len, reverse=True)
        return re.compile("|".join(re.escape(t) for t in texts))

    def decode_one(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self.codec.decode([token_id])
        return text


@dataclass
class RolloutContext:
    setup: CheckSetup
    conversation: Conversation
    renders: dict[Key, RenderedPrefix]
    alignments: dict[int, TurnAlignment]
    _refused: set[Key] = field(default_factory=set)
    traced: object | None = field(default=None, repr=False)
    """The simulated rollout, once :func:`tito_audit.audit.checks.trace.trace_of` has walked it."""
    _texts: dict[int, str | None] = field(default_factory=dict, repr=False)
    _normalized: dict[int, object] = field(default_factory=dict, repr=False)

    @cached_property
    def text(self) -> TextContext:
        setup = self.setup
        normalize = setup.codec.normalize if setup.codec.has_normalizer else None
        return TextContext(
            self.conversation.messages, setup.controls, setup.stop_texts, setup.control_pattern, normalize
        )

    def history(self, k: int) -> RenderedPrefix | None:
        """``render(M[:k], gp=False)``, rendered on first use (None when the template refuses it)."""
        key = (k, False)
        if key not in self.renders and key not in self._refused:
            self.render_histories([k])
        return self.renders.get(key)

    def render_histories(self, ks: Sequence[int]) -> None:
        """Render ``render(M[:k], gp=False)`` for every ``k`` not yet rendered: in one batch (one tokenizer
        call) when the template renders them all, else one by one, remembering refusals."""
        missing = [(k, False) for k in ks if (k, False) not in self.renders and (k, False) not in self._refused]
        if not missing:
            return
        messages, tools = self.conversation.messages, self.conversation.tools
        try:
            self.renders.update(self.setup.renderer.prefixes(messages, tools, missing))
            return
        except RenderError:
            pass
        for key in missing:
            try:
                self.renders.update(self.setup.renderer.prefixes(messages, tools, [key]))
            except RenderError:
                self._refused.add(key)

    def history_text(self, k: int) -> str | None:
        rendered = self.history(k)
        return rendered.text if rendered is not None else None

    def prefix_text(self, k: int) -> str | None:
        """``render(M[:k], gp=False)`` as text: the render's when it is rendered already, else rendered as text only
        (no ids: a diagnosis that compares texts does not tokenize them), remembered; None when the template
        refuses it."""
        rendered = self.renders.get((k, False))
        if rendered is not None:
            return rendered.text
        if (k, False) in self._refused:
            return None
        if k not in self._texts:
            conversation = self.conversation
            self._texts[k] = self.setup.renderer.texts(conversation.messages, conversation.tools, [(k, False)])[
                (k, False)
            ]
        return self._texts[k]

    def normalized_history(self, k: int) -> str | None:
        """:meth:`prefix_text` through the tokenizer's normalizer, normalized once per conversation (the owner of
        every divergence is looked for among the prefix renders)."""
        normalized = self._normalized.get(k, _MISSING)
        if normalized is _MISSING:
            text = self.prefix_text(k)
            normalized = self._normalized[k] = self.setup.codec.normalize(text) if text is not None else None
        return normalized  # type: ignore[return-value]
