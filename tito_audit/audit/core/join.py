"""The join of a token buffer and the template's next prompt (docs/contract.md "The simulated rollout").

Before the next assistant turn, a TITO loop holds a buffer ``B`` (prompt, sampled completions, bridges) and the
template gives the next prompt ``R``. Two properties decide whether ``B`` can be followed by appending only:

- **text stability**: ``decode(B)`` is a prefix of ``R`` (both compared after the tokenizer's normalizer: a
  normalizer changing what decoding gives back is the tokenizer's doing, not the template's);
- **seam stability**: ``encode(decode(B))`` is a token prefix of ``ids(R)`` (else a BPE merge crosses the join).

When both hold, the **bridge** is ``ids(R)`` after the canonical buffer. The audit's simulated rollout
(:mod:`tito_audit.audit.checks.trace`) and the training-loop guard (:mod:`tito_audit.session`) both decide with
:func:`join`, so the two cannot disagree about a step.

Example (a template that keeps everything)::

    B text = "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nHello<|im_end|>"
    R      = B text + "\\n<|im_start|>tool\\n42<|im_end|>\\n<|im_start|>assistant\\n"
    join(...).bridge == ids of "\\n<|im_start|>tool\\n42<|im_end|>\\n<|im_start|>assistant\\n"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tito_audit.audit.core.diff import first_difference
from tito_audit.model.render import RenderedPrefix
from tito_audit.model.tokens import TokenCodec


@dataclass
class Join:
    """The verdict on one join, with what the evidence needs."""

    prompt: RenderedPrefix
    """``R``: the template's next prompt, as text and ids."""
    normalized_buffer: str
    normalized_prompt: str
    text_index: int | None
    """First character where the buffer's text is not a prefix of ``R`` (None: text-stable)."""
    canonical: list[int] | None = None
    """``encode(decode(B))`` (computed only when the text holds)."""
    seam_index: int | None = None
    """First token where the canonical buffer is not a prefix of ``ids(R)`` (None: seam-stable)."""

    @property
    def followed(self) -> bool:
        return self.text_index is None and self.seam_index is None

    @property
    def bridge(self) -> list[int] | None:
        """The ids an append-only loop adds after the buffer (None when it cannot follow)."""
        if not self.followed or self.canonical is None:
            return None
        return list(self.prompt.ids[len(self.canonical) :])


def join(
    codec: TokenCodec,
    buffer_text: str,
    prompt: RenderedPrefix,
    canonical: Callable[[], list[int]] | None = None,
) -> Join:
    """Decide text and seam stability of a buffer whose decoded text is ``buffer_text`` against ``prompt``.

    ``canonical`` gives the buffer's canonical ids when the text holds; by default ``encode(buffer_text)``.
    Backends that tokenize message by message (mistral-common) have no single-string encoding and pass the
    canonical pieces they produced.
    """
    normalized_buffer, normalized_prompt = codec.normalize(buffer_text), codec.normalize(prompt.text)
    result = Join(prompt, normalized_buffer, normalized_prompt, first_difference(normalized_buffer, normalized_prompt))
    if result.text_index is not None:
        return result
    result.canonical = canonical() if canonical is not None else codec.encode(buffer_text)
    result.seam_index = first_difference(result.canonical, prompt.ids)
    return result


def join_text_only(codec: TokenCodec, buffer_text: str, buffer_ids: list[int], prompt: RenderedPrefix) -> Join:
    """Text stability alone (a stand-in tokenizer without the model's vocabulary: no seam claim is made)."""
    normalized_buffer, normalized_prompt = codec.normalize(buffer_text), codec.normalize(prompt.text)
    text_index = first_difference(normalized_buffer, normalized_prompt)
    canonical = None if text_index is not None else list(buffer_ids)
    return Join(prompt, normalized_buffer, normalized_prompt, text_index, canonical)
