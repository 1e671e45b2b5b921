"""The BOS token doubled (cause ``bos-duplication``, defined in :mod:`tito_audit.audit.core.causes.bos_duplication`):
the first audited conversation's render, tokenized as a trainer that calls ``tokenizer(text)`` with its defaults does,
e.g. ``[128000, 128000, 128006, ...]``; the fix is ``add_special_tokens=False``.
"""

from __future__ import annotations

from tito_audit.audit.core.causes import bos_duplication
from tito_audit.audit.findings.finding_context import FindingContext, FindingRule
from tito_audit.audit.results import Finding
from tito_audit.model.load_folder import JINJA

NAME = bos_duplication.NAME


def find(context: FindingContext) -> list[Finding]:
    if not context.accepted or context.model.backend != JINJA:
        return []
    doubled, evidence = bos_duplication.doubled_bos(context.codec, context.accepted[0][1])
    if not doubled:
        return []
    return [
        Finding(
            NAME,
            "the template writes the BOS token and tokenizer(text) with default arguments adds another; "
            "tokenize rendered text with add_special_tokens=False",
            evidence=evidence,
        )
    ]


FINDING = FindingRule(NAME, find)
