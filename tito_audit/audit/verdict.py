"""Verdict rules (docs/contract.md "Verdicts"), read from the check results of one variant and nothing else.

- ``ready``: every step kind is text- and seam-stable;
- ``ready-tool-only``: tool-only steps are, steps with user, system or assistant-after-assistant messages
  are not;
- ``broken``: some tool-only step is not;
- ``unsupported``: no conversation with tool calls and tool results rendered faithfully (the template
  raises or drops them), so there is no tool-only step to judge.

Re-render drift, roundtrip findings and the bridge check are reported beside the verdict, never folded in.
"""

from __future__ import annotations

from collections.abc import Mapping

from tito_audit.audit.results import BROKEN, READY, READY_TOOL_ONLY, UNSUPPORTED, CheckResult
from tito_audit.conversations.conversation import TOOL

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
