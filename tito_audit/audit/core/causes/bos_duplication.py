"""``bos-duplication``: the template writes the BOS token and the tokenizer, called with its defaults on the rendered
text, adds another (every sample then starts with two BOS ids).

Detected as a finding beside the verdict (:mod:`tito_audit.audit.findings.bos_duplication`), and named as the drift
cause of a buffer whose first id differs from the render's. Confirmed from the definition: the rendered text,
tokenized with the tokenizer's defaults, starts with the BOS id twice.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation

NAME = "bos-duplication"
LINE = "The tokenizer adds a BOS token that the template already wrote."


def confirm(case: Case) -> Confirmation:
    """``tokenizer(render)`` with default arguments begins with two BOS ids."""
    bos = case.codec.bos_id
    if bos is None:
        return Confirmation(NAME, False, "the tokenizer has no BOS token")
    text = case.later or case.renderer.text(case.messages, case.tools, False)
    ids = case.codec.encode_with_default_specials(text)
    return Confirmation(NAME, ids[:2] == [bos, bos], f"first ids {ids[:3]}")
