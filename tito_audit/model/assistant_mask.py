"""The template's assistant mask: the tokens a trainer with assistant-only loss trains on.

A template marks what the model writes with ``{% generation %}`` … ``{% endgeneration %}`` (a transformers extension).
transformers records the characters each block writes and, asked for
``apply_chat_template(..., tokenize=True, return_dict=True, return_assistant_tokens_mask=True)``, sets
``assistant_masks`` to 1 from the token holding a block's first character through the token holding its last.
:func:`assistant_mask` asks exactly that, through the path every audit render takes: the template compiled with the
render guard installed (:func:`~tito_audit.model.render.guarded_template`) and the per-render time and length limits
of the renderer (:mod:`tito_audit.model.render_guard`), so a hostile template cannot hang a thread here either.

Example: with ``{{ '<|im_start|>assistant\\n' }}{% generation %}{{ content }}<|im_end|>{% endgeneration %}`` the mask
of ``[user, assistant "Hi"]`` is 1 on ``Hi`` and ``<|im_end|>`` and 0 on the header and everything before it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.errors import TemplateTimeoutError
from tito_audit.model.load_folder import JINJA
from tito_audit.model.render import Renderer, RenderError, RenderTimeout, RenderTooLong, deadline, guarded_template
from tito_audit.model.template_errors import error_line

GENERATION_TAG = re.compile(r"\{\%-?\s*generation\s*-?\%\}")
"""transformers' own test for a template with generation blocks (it warns and marks nothing without one)."""


def has_generation_blocks(source: str | None) -> bool:
    """Whether ``source`` has a ``{% generation %}`` block, by transformers' test.

    >>> has_generation_blocks("{% generation %}{{ m.content }}{% endgeneration %}"), has_generation_blocks("{{ x }}")
    (True, False)
    """
    return bool(source) and GENERATION_TAG.search(source or "") is not None


def generation_blocks(source: str) -> list[tuple[int, int]]:
    """The source lines of each ``{% generation %}`` tag and its ``{% endgeneration %}``, in order (a block left
    open ends at the last line), read from Jinja's own lexer; empty when the template does not lex.

    >>> generation_blocks("a\\n{% generation %}\\nb\\n{% endgeneration %}")
    [(2, 4)]
    """
    from tito_audit.model.variants import jinja_environment

    try:
        tokens = list(jinja_environment().lexer.tokeniter(source, None))
    except Exception:
        return []
    blocks: list[tuple[int, int]] = []
    open_lines: list[int] = []
    after_tag = False
    for line, kind, text in tokens:
        if kind == "block_begin":
            after_tag = True
            continue
        if after_tag and kind == "name":
            if text == "generation":
                open_lines.append(line)
            elif text == "endgeneration" and open_lines:
                blocks.append((open_lines.pop(), line))
        if kind != "whitespace":
            after_tag = False
    last = source.count("\n") + 1
    blocks += [(line, last) for line in open_lines]
    return sorted(blocks)


def lines_phrase(blocks: Sequence[tuple[int, int]]) -> str:
    """``generation block at lines 76–82`` (several: ``generation blocks at lines 12–14, 30–41``).

    >>> lines_phrase([(76, 82)])
    'generation block at lines 76–82'
    """
    if not blocks:
        return "no generation block found by the lexer"
    spans = ", ".join(f"{a}–{b}" if a != b else f"{a}" for a, b in blocks)
    noun = "generation blocks" if len(blocks) > 1 else "generation block"
    where = "line" if len(blocks) == 1 and blocks[0][0] == blocks[0][1] else "lines"
    return f"{noun} at {where} {spans}"


@dataclass(frozen=True)
class MaskedRender:
    """``render(M, gp=False)`` tokenized with its assistant mask: ``ids`` and ``mask`` as ``apply_chat_template``
    returns them (``input_ids``, ``assistant_masks``), ``offsets`` the characters each token covers."""

    ids: list[int]
    mask: list[int]
    offsets: list[tuple[int, int]]


def assistant_mask(renderer: Renderer, messages: Sequence[dict], tools: list[dict] | None) -> MaskedRender:
    """``apply_chat_template(messages, tools=tools, add_generation_prompt=False, tokenize=True, return_dict=True,
    return_assistant_tokens_mask=True, **variant kwargs)`` with the renderer's template, kwargs and limits.

    Raises :class:`~tito_audit.model.render.RenderError` when the template refuses, the render passes a limit (with
    ``refuse_after_timeout`` the audit ends instead, :class:`~tito_audit.errors.TemplateTimeoutError`, as every
    render of the renderer does) or the tokenizer gives no character offsets (a slow tokenizer)."""
    model, limits = renderer.model, renderer.limits
    if model.backend != JINJA or model.template_source is None:
        raise RenderError(f"{model.backend} renders without a Jinja template: no assistant mask")
    renderer.renders += 1
    try:
        with warnings.catch_warnings(), deadline.of(limits):
            warnings.simplefilter("ignore")
            guarded_template(model.template_source, limits)
            out: Any = model.tokenizer.apply_chat_template(
                list(messages),
                tools=tools,
                chat_template=model.template_source,
                add_generation_prompt=False,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
                **renderer.kwargs,
            )
    except (RenderTimeout, RenderTooLong) as exc:
        if limits.refuse_after_timeout:
            raise TemplateTimeoutError(f"{error_line(exc)}: the template is refused for the rest of the audit") from exc
        raise RenderError(error_line(exc)) from exc
    except RecursionError as exc:
        raise RenderError("RecursionError: template recursion too deep") from exc
    except Exception as exc:
        raise RenderError(error_line(exc)) from exc
    encodings = getattr(out, "encodings", None)
    if not encodings:
        raise RenderError("the tokenizer gives no character offsets (not a fast tokenizer): no assistant mask")
    offsets = [(int(a), int(b)) for a, b in encodings[0].offsets]
    if offsets and offsets[-1][1] > limits.max_chars:
        raise RenderError(f"output longer than {limits.max_chars} characters (raise it with --max-render-chars)")
    return MaskedRender(list(out["input_ids"]), [int(bit) for bit in out["assistant_masks"]], offsets)
