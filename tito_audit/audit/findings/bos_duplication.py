"""``bos-duplication``: the template writes the BOS token and ``tokenizer(text)`` adds another.

Trainers that tokenize the rendered text with default arguments then start every sample with two BOS ids,
e.g. ``[128000, 128000, 128006, ...]``; the fix is ``add_special_tokens=False``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tito_audit.audit.core.causes import bos_duplication
from tito_audit.audit.results import Finding
from tito_audit.model.load_folder import JINJA

if TYPE_CHECKING:
    from tito_audit.audit.findings.finding_context import FindingContext

NAME = bos_duplication.NAME


def find(context: FindingContext) -> list[Finding]:
    bos = context.codec.bos_id
    if bos is None or not context.accepted or context.model.backend != JINJA:
        return []
    ids = context.codec.encode_with_default_specials(context.accepted[0][1])
    if ids[:2] != [bos, bos]:
        return []
    return [
        Finding(
            NAME,
            "the template writes the BOS token and tokenizer(text) with default arguments adds another; "
            "tokenize rendered text with add_special_tokens=False",
            evidence=f"first ids {ids[:3]}",
        )
    ]
