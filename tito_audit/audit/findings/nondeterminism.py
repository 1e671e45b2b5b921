"""``nondeterministic-template``: two renders of the same conversation differ (dates, randomness).

A few audited conversations are rendered again, once with the same clock and once with another date; any
difference is reported with the character where the renders part, e.g. a system prompt holding
``strftime_now('%Y-%m-%d')``::

    "...Today is 2026-01-15..."  vs  "...Today is 2027-08-03..."
"""

from __future__ import annotations

from tito_audit.audit.core.causes import nondeterministic_template
from tito_audit.audit.core.diff import first_difference, text_window
from tito_audit.audit.findings.finding_context import FindingContext, FindingRule
from tito_audit.audit.results import Finding
from tito_audit.model.render import ALTERNATE_CLOCK, Renderer, RenderError, frozen_clock

NAME = nondeterministic_template.NAME
SAMPLE = 6


def find(context: FindingContext) -> list[Finding]:
    findings: list[Finding] = []
    sample = context.accepted[:SAMPLE]
    # a renderer of its own, that remembers no render: each conversation is rendered again
    used = context.renderer
    renderer = Renderer(context.model, context.codec, used.kwargs, used.limits)
    for label, clock in (("a second render with the same clock", context.clock), ("another date", ALTERNATE_CLOCK)):
        with frozen_clock(context.model.template_source, clock):
            for conversation, text in sample:
                last = (len(conversation.messages), False)
                try:
                    again = renderer.prefixes(conversation.messages, conversation.tools, [last])[last].text
                except RenderError:
                    continue
                index = first_difference(text, again)
                if index is not None or len(text) != len(again):
                    index = index if index is not None else min(len(text), len(again))
                    findings.append(
                        Finding(
                            NAME,
                            f"rendering {conversation.id} with {label} gives different text at character {index}",
                            evidence=f"{text_window(text, index, 40)!r} vs {text_window(again, index, 40)!r}",
                        )
                    )
                    break
    return findings


FINDING = FindingRule(NAME, find)
