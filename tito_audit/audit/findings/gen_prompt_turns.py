"""How many turns the generation prompt parts from (cause ``gen-prompt-mismatch``, defined in
:mod:`tito_audit.audit.core.causes.gen_prompt_mismatch`): assistant turns whose generation prompt is not a prefix of
the turn as the template renders it, in any form a model could produce (:mod:`tito_audit.audit.realization.realize`).

The step failures carry the label where the buffer breaks; this finding says how many turns are affected,
e.g. "98 of 290 assistant turns".
"""

from __future__ import annotations

from tito_audit.audit.core.causes import gen_prompt_mismatch
from tito_audit.audit.findings.finding_context import FindingContext, FindingRule
from tito_audit.audit.results import Finding

NAME = gen_prompt_mismatch.NAME


def find(context: FindingContext) -> list[Finding]:
    if not context.gen_prompt_mismatches:
        return []
    return [
        Finding(
            NAME,
            f"{context.gen_prompt_mismatches} of {context.completions} assistant turns: the generation prompt "
            "is not a prefix of the turn as the template renders it, in any form a model could produce",
        )
    ]


FINDING = FindingRule(NAME, find)
