"""Render conversations through the model's own chat-template machinery, with a frozen clock.

``render(M, gp)`` is ``apply_chat_template(M, tools=T, add_generation_prompt=gp, **kwargs)`` as text and
``ids(M, gp)`` the same tokenized as ``apply_chat_template(..., tokenize=True)`` does. The template's
``strftime_now`` reads a fixed clock during the audit so that reports are reproducible; the
nondeterminism check renders with a second clock to find templates that depend on the date.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.errors import ModelLoadError, TemplateTimeoutError
from tito_audit.model.engine_rendered import ENGINE_ENCODER, RenderRefusal, encoder_texts
from tito_audit.model.load_folder import JINJA, MISTRAL_COMMON, LoadedModel
from tito_audit.model.mistral_render import mistral_ids, mistral_text
from tito_audit.model.render_direct import (  # noqa: F401  (frozen_clock and guarded_template are read from here too)
    DirectTemplate,
    frozen_clock,
    guarded_template,
)
from tito_audit.model.render_guard import (  # noqa: F401  (the clocks and limits are read from here too)
    ALTERNATE_CLOCK,
    DEFAULT_CLOCK,
    RenderLimits,
    RenderTimeout,
    RenderTooLarge,
    RenderTooLong,
    clock,
    deadline,
    guard,
)
from tito_audit.model.render_memo import Refused
from tito_audit.model.template_errors import error_line
from tito_audit.model.tokens import TokenCodec

Message = dict[str, Any]


class RenderError(Exception):
    """The template (or backend) refused to render; ``str(err)`` is one line naming the exception."""


class PrefixRenderError(RenderError):
    """Rendering ``messages[:k]`` with ``add_generation_prompt=gp`` failed."""

    def __init__(self, k: int, gp: bool, reason: str) -> None:
        super().__init__(reason)
        self.k = k
        self.gp = gp
        self.reason = reason


@dataclass(frozen=True)
class RenderedPrefix:
    text: str
    ids: list[int]


class Renderer:
    """Renders prefixes of conversations for one model, template and variant."""

    def __init__(
        self,
        model: LoadedModel,
        codec: TokenCodec,
        kwargs: Mapping[str, Any] | None = None,
        limits: RenderLimits | None = None,
        remember: bool = False,
    ) -> None:
        """``remember``: renders made through the compiled template are kept in the model's memory of renders
        (:attr:`~tito_audit.model.load_folder.LoadedModel.renders`), shared by its other renderers that keep them
        (an audit's, a fix's proof; see :mod:`tito_audit.model.render_memo`)."""
        self.limits = limits or RenderLimits()
        self.model = model
        self.codec = codec
        self.kwargs = dict(kwargs or {})
        self.renders = 0
        self._fast = (
            DirectTemplate.create(model, self.kwargs, self.limits, model.renders if remember else None)
            if model.backend == JINJA
            else None
        )
        self._timed_out: str | None = None
        """Why this renderer refuses every render (a render ran past the time limit or made too long an output),
        when it does."""

    @property
    def uses_jinja(self) -> bool:
        return self.model.backend == JINJA

    def forget(self, messages: Sequence[Message], tools: list[dict] | None) -> None:
        """Drop what the renderer keeps for ``messages`` and ``tools`` (see :meth:`DirectTemplate.forget`)."""
        if self._fast is not None:
            self._fast.forget(messages, tools)

    def text(self, messages: Sequence[Message], tools: list[dict] | None, gp: bool) -> str:
        """render(M, gp); raises :class:`RenderError` when the template refuses. An engine-rendered model through its
        engine's encoder; a Jinja template through the compiled template while the direct path is on (see
        :meth:`_fast_texts`), else through ``apply_chat_template``."""
        if self.model.backend == ENGINE_ENCODER:
            return self._engine_texts(messages, tools, [(len(messages), gp)], strict=True)[0] or ""
        if self._fast is not None:
            try:
                texts = self._fast_texts(messages, tools, [(len(messages), gp)])
            except PrefixRenderError as exc:  # the template's own exception as its cause, as the slow way gives it
                raise RenderError(exc.reason) from exc.__cause__
            if texts is not None and texts[0] is not None:
                return texts[0]
        return self._applied_text(messages, tools, gp)

    def _applied_text(self, messages: Sequence[Message], tools: list[dict] | None, gp: bool) -> str:
        """render(M, gp) through ``apply_chat_template`` (the reference the direct path is checked against)."""
        self.renders += 1
        self._refuse_if_timed_out()
        tokenizer = self.model.tokenizer
        try:
            with warnings.catch_warnings(), deadline.of(self.limits):
                warnings.simplefilter("ignore")
                if self.uses_jinja:
                    assert self.model.template_source is not None, "a model rendered through Jinja has its source"
                    guarded_template(self.model.template_source, self.limits)
                    return self._bounded(
                        tokenizer.apply_chat_template(
                            list(messages),
                            tools=tools,
                            chat_template=self.model.template_source,
                            add_generation_prompt=gp,
                            tokenize=False,
                            **self.kwargs,
                        )
                    )
                return self._bounded(mistral_text(tokenizer, list(messages), tools, gp, self.kwargs))
        except (RenderTimeout, RenderTooLong) as exc:
            self._timeout(exc)
            raise RenderError(error_line(exc)) from exc
        except RecursionError as exc:
            raise RenderError("RecursionError: template recursion too deep") from exc
        except Exception as exc:
            raise RenderError(error_line(exc)) from exc

    def text_or_none(self, messages: Sequence[Message], tools: list[dict] | None, gp: bool) -> str | None:
        """render(M, gp), or None when the template refuses."""
        try:
            return self.text(messages, tools, gp)
        except RenderError:
            return None

    def prefixes(
        self, messages: Sequence[Message], tools: list[dict] | None, needed: Sequence[tuple[int, bool]]
    ) -> dict[tuple[int, bool], RenderedPrefix]:
        """Render ``messages[:k]`` with ``add_generation_prompt=gp`` for each ``(k, gp)``, once each.

        Texts are tokenized in one batch. For Jinja templates ids equal
        ``apply_chat_template(..., tokenize=True)``; backends that tokenize piecewise (mistral-common)
        are asked for their own ids.
        """
        keys = list(dict.fromkeys(needed))
        if self.model.backend == ENGINE_ENCODER:  # vLLM's encoder writes the text, tokenized here whole
            texts = [text or "" for text in self._engine_texts(messages, tools, keys, strict=True)]
        else:
            texts = self._template_texts(messages, tools, keys)
        if self.model.backend != MISTRAL_COMMON:
            all_ids = self.codec.encode_many(texts)
        else:
            all_ids = [mistral_ids(self.model.tokenizer, list(messages[:k]), tools, gp, self.kwargs) for k, gp in keys]
        return {key: RenderedPrefix(text, ids) for key, text, ids in zip(keys, texts, all_ids, strict=True)}

    def _template_texts(
        self, messages: Sequence[Message], tools: list[dict] | None, keys: list[tuple[int, bool]]
    ) -> list[str]:
        """The template's text for each ``(k, gp)`` prefix: through the direct path while it is on, else one by one;
        the first prefix the template refuses raises :class:`PrefixRenderError`."""
        fast = self._fast_texts(messages, tools, keys) if self._fast is not None else None
        if fast is not None:
            return [text for text in fast if text is not None]  # none refused: it raised
        texts = []
        for k, gp in keys:
            try:
                texts.append(self.text(messages[:k], tools, gp))
            except RenderError as exc:
                raise PrefixRenderError(k, gp, str(exc)) from exc
        return texts

    def texts(
        self, messages: Sequence[Message], tools: list[dict] | None, needed: Sequence[tuple[int, bool]]
    ) -> dict[tuple[int, bool], str | None]:
        """Render ``messages[:k]`` for each ``(k, gp)`` as text only (no tokenization); None where the template
        refuses. Batched through the direct path when it is on, one by one otherwise."""
        keys = list(dict.fromkeys(needed))
        if self.model.backend == ENGINE_ENCODER:
            return dict(zip(keys, self._engine_texts(messages, tools, keys, strict=False), strict=True))
        if self._fast is not None:
            # a prefix the template refuses is None, the others rendered the direct way still (the slow way paid
            # Jinja's rewrite of every refusal's traceback: most of a way-out proof on a template that refuses shapes)
            texts = self._fast_texts(messages, tools, keys, refused_as_none=True)
            if texts is not None:
                return dict(zip(keys, texts, strict=True))
        out: dict[tuple[int, bool], str | None] = {}
        for k, gp in keys:
            try:
                out[(k, gp)] = self._applied_text(messages[:k], tools, gp)
            except RenderError:
                out[(k, gp)] = None
        return out

    def _refuse_if_timed_out(self) -> None:
        if self._timed_out is not None:
            raise TemplateTimeoutError(self._timed_out)

    def _timeout(self, exc: RenderTimeout | RenderTooLong) -> None:
        """A render ran past the limit or made too long an output: with ``refuse_after_timeout`` the template is
        refused from now on (raises); otherwise the caller reports this render as refused."""
        if self.limits.refuse_after_timeout:
            if isinstance(exc, RenderTimeout):
                self._timed_out = (
                    f"rendering took longer than {self.limits.max_seconds:g}s: the template is refused for the rest "
                    "of the audit (raise the limit with --max-render-seconds)"
                )
            else:
                self._timed_out = f"{exc}: the template is refused for the rest of the audit"
            self._refuse_if_timed_out()

    def _bounded(self, text: str) -> str:
        if len(text) > self.limits.max_chars:
            raise RenderTooLong(
                f"output longer than {self.limits.max_chars} characters (raise it with --max-render-chars)"
            )
        return text

    def _fast_texts(
        self,
        messages: Sequence[Message],
        tools: list[dict] | None,
        keys: list[tuple[int, bool]],
        refused_as_none: bool = False,
    ) -> list[str | None] | None:
        """Prefix renders through the compiled template, each message prepared once (see
        :meth:`DirectTemplate.prepare`); the first prefix the template refuses raises :class:`PrefixRenderError`,
        or, ``refused_as_none``, is None.

        Checked against ``apply_chat_template`` on the first conversations and then now and again; at the
        first difference the fast path is switched off and None tells the caller to render the slow way.
        """
        fast = self._fast
        assert fast is not None
        if fast.switched_off():  # another renderer of this template found a difference
            self._fast = None
            return None
        # each message's preparation is kept by the message itself, so a list changed in place is prepared as it is
        prepared = fast.prepare(messages, tools)
        texts: list[str | None] = []
        self._refuse_if_timed_out()
        for k, gp in keys:
            remembered = fast.remembered(prepared, k, gp)
            if isinstance(remembered, str):
                texts.append(remembered)
                continue
            if remembered is not None:  # refused before, as it would be again
                if not refused_as_none:
                    raise PrefixRenderError(k, gp, remembered.reason)
                texts.append(None)
                continue
            self.renders += 1
            self._refuse_if_timed_out()
            try:
                with deadline.of(self.limits):
                    text = self._bounded(fast.render(prepared, k, gp))
                fast.remember(prepared, k, gp, text)
                texts.append(text)
            except (RenderTimeout, RenderTooLong) as exc:
                self._timeout(exc)
                if not refused_as_none:
                    raise PrefixRenderError(k, gp, error_line(exc)) from exc
                texts.append(None)
            except RecursionError as exc:
                if not refused_as_none:
                    raise PrefixRenderError(k, gp, "RecursionError: template recursion too deep") from exc
                texts.append(None)
            except Exception as exc:
                reason = error_line(exc)
                fast.remember(prepared, k, gp, Refused(reason))
                if not refused_as_none:
                    raise PrefixRenderError(k, gp, reason) from exc
                texts.append(None)
        if keys and fast.should_verify():
            k, gp = max(keys)
            try:
                reference: str | None = self._applied_text(messages[:k], tools, gp)
            except RenderError:
                reference = None
            if reference != texts[keys.index((k, gp))]:
                fast.switch_off()
                self._fast = None
                return None
        return texts

    # -- an engine's encoder (engine-rendered models) ---------------------------------------
    def _engine_texts(
        self, messages: Sequence[Message], tools: list[dict] | None, keys: Sequence[tuple[int, bool]], strict: bool
    ) -> list[str | None]:
        """The encoder's text for each ``(k, gp)`` prefix, in one request to vLLM's worker: a refused prefix (or an
        encoder that cannot run) raises :class:`PrefixRenderError` when ``strict``, else is None."""
        self.renders += len(keys)
        self._refuse_if_timed_out()
        try:
            rendered = encoder_texts(self.model, self.kwargs, messages, tools, keys, self.limits.max_chars)
        except ModelLoadError:
            raise
        except Exception as exc:
            if not strict:
                return [None] * len(keys)
            raise PrefixRenderError(*keys[0], error_line(exc)) from exc
        for key, text in zip(keys, rendered, strict=True):
            if strict and isinstance(text, RenderRefusal):
                raise PrefixRenderError(*key, text.reason)
        return [text if isinstance(text, str) else None for text in rendered]
