"""Verdict rules (SPEC "Verdicts"), read from the check results of one variant and nothing else.

- ``ready``: every step kind is text- and seam-stable;
- ``ready-tool-only``: tool-only steps are, steps with user, system or assistant-after-assistant messages
  are not;
- ``broken``: some tool-only step is not;
- ``unsupported``: no conversation with tool calls and tool results rendered faithfully (the template
  raises or drops them), so there is no tool-only step to judge.

Re-render drift, roundtrip findings and the bridge check are reported beside the verdict, never folded in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tito_audit.audit.results import BROKEN, READY, READY_TOOL_ONLY, UNSUPPORTED, CheckResult, FormSteps
from tito_audit.conversations.conversation import TOOL

FORM_WORDS = {
    "reasoning empty": "when the model closes the reasoning block at once",
    "reasoning present": "after turns with reasoning",
    "reasoning absent": "after turns without reasoning",
    "reasoning empty, sent back without it": "when the model closes the reasoning block at once",
}


WALKED = "the parse check walked"
"""How the rollout with the parser says what its counts are of: the steps of the conversations it walks, fewer than
the main check's (no conversation without declared tools, none whose arguments the template quotes)."""


def verdict_for(
    checks: Mapping[str, CheckResult], native_tool_conversations: int, walked_by: str | None = None
) -> tuple[str, str]:
    """(verdict, one-line reason) from the ``rollout`` check's rows and the number of conversations audited
    with the template's own tool support (not reshaped into chat). ``walked_by`` names the check whose steps the
    counts are (``the parse check walked``), where they are not the main check's."""
    rows = {row.category: row for row in checks["rollout"].rows}
    tool = rows.get(TOOL)
    causes = ", ".join(sorted(checks["rollout"].cause_counts)) or "no cause"
    of, by = ("of the", f" {walked_by}") if walked_by else ("of", "")
    if native_tool_conversations == 0 or tool is None or tool.cases - tool.refused == 0:
        return UNSUPPORTED, "no conversation with tool calls and tool results rendered faithfully"
    if tool.failed:
        return BROKEN, (
            f"{tool.failed} {of} {tool.cases - tool.refused} tool-only steps{by} are not text- or seam-stable "
            f"({causes})"
        )
    other = [row for category, row in rows.items() if category != TOOL and row.failed]
    if other:
        failed = sum(r.failed for r in other)
        audited = sum(r.cases - r.refused for r in other)
        kinds = "/".join(sorted(r.category for r in other))
        return READY_TOOL_ONLY, (
            f"every tool-only step{by} is stable; {failed} {of} {audited} steps with {kinds} messages{by} are not "
            f"({causes})"
        )
    return READY, f"every appended step{by} is text- and seam-stable"


def form_clause(verdict: str, forms: Sequence[FormSteps]) -> str:
    """When the failing steps all follow turns of one reasoning form and the steps after the other forms hold,
    which form that is, e.g. ``"; fails when the model closes the reasoning block at once: 33 of 33 tool steps"``
    (a reader can judge how often their model writes it); empty otherwise."""
    if verdict == BROKEN:
        kinds, label = {TOOL}, "tool"
    elif verdict == READY_TOOL_ONLY:
        kinds, label = {form.kind for form in forms} - {TOOL}, "non-tool"
    else:
        return ""
    totals: dict[str, list[int]] = {}
    for form in forms:
        if form.kind in kinds:  # forms said alike are one (the model closed the block at once, however sent back)
            tally = totals.setdefault(FORM_WORDS.get(form.form, form.form), [0, 0])
            tally[0] += form.steps
            tally[1] += form.failed
    failing = [(form, steps, failed) for form, (steps, failed) in totals.items() if failed]
    holding = [form for form, (steps, failed) in totals.items() if steps and not failed]
    if len(failing) != 1 or not holding:
        return ""
    words, steps, failed = failing[0]
    return f"; fails {words}: {failed} of {steps} {label} steps"
