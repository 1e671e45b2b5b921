"""``bos-duplication``: the template writes the BOS token and the tokenizer, called with its defaults on the rendered
text, adds another (every sample then starts with two BOS ids).

Detected as a finding beside the verdict (:mod:`tito_audit.audit.findings.doubled_bos`), and named as the drift
cause of a buffer whose first id differs from the render's. Confirmed from the definition: the rendered text,
tokenized with the tokenizer's defaults, starts with the BOS id twice (:func:`doubled_bos`, which the finding asks
too).
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.model.tokens import TokenCodec

NAME = "bos-duplication"
LINE = "The tokenizer adds a BOS token that the template already wrote."
NO_BOS = "the tokenizer has no BOS token"


def doubled_bos(codec: TokenCodec, text: str) -> tuple[bool, str]:
    """Whether ``tokenizer(text)`` with default arguments begins with the BOS id twice, and the evidence (its first
    ids, or that the tokenizer has no BOS token)."""
    bos = codec.bos_id
    if bos is None:
        return False, NO_BOS
    ids = codec.encode_with_default_specials(text)
    return ids[:2] == [bos, bos], f"first ids {ids[:3]}"


def confirm(case: Case) -> Confirmation:
    """``tokenizer(render)`` with default arguments begins with two BOS ids."""
    if case.codec.bos_id is None:  # nothing to render
        return Confirmation(NAME, False, NO_BOS)
    text = case.later or case.renderer.text(case.messages, case.tools, False)
    return Confirmation(NAME, *doubled_bos(case.codec, text))


CAUSE = Cause(NAME, LINE, confirm)
