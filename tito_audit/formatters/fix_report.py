"""The way out as published in ``reports/fixes/``: a Markdown page per model and the unified diff of its fix.

Published pages quote only short windows of the template (each edit with a little context); the diff is
published only when its lines are short (a template written on one line would be quoted whole): the full
patched template is never published, ``tito-audit patch MODEL`` writes it locally.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tito_audit.audit.results import AuditReport
from tito_audit.formatters.training_section import TRAINING_FILE, training_section
from tito_audit.outputs import write_if_changed
from tito_audit.repair.fixes.search import FixOutcome
from tito_audit.repair.fixes.source import TemplateSource
from tito_audit.repair.way_out import WayOut

WINDOW = 40
"""Characters of context on each side of an edit."""
MAX_DIFF_LINE = 240
"""A diff with a longer line is not published (it would quote too much of the template)."""


FOLDED = (
    "The constants the edits left behind (`{% if true %}`, `x and true`, …) are folded: the template offered renders "
    "byte-identically to the unfolded edit under every variant, and its audit is the one above."
)


def edit_windows(fix: FixOutcome) -> list[str]:
    """The edits as ``line N (fixes): …before… → …after…``, nearby edits shown together, with some context."""
    source = TemplateSource(fix.before_source)
    edits = fix.shown_edits()
    groups: list[list[tuple]] = []
    for pair in edits:
        if groups and pair[0].start - groups[-1][-1][0].end <= 2 * WINDOW:
            groups[-1].append(pair)
        else:
            groups.append([pair])
    lines = []
    for group in groups:
        start, end = group[0][0].start, group[-1][0].end
        left = fix.before_source[max(0, start - WINDOW) : start]
        right = fix.before_source[end : end + WINDOW]
        after, position = [], start
        for edit, _ in group:
            after += [fix.before_source[position : edit.start], edit.text]
            position = edit.end
        names = ", ".join(dict.fromkeys(name for _, name in group))
        lines.append(
            f"line {source.line_of(start)} ({names}): `…{_code(left + fix.before_source[start:end] + right)}…` → "
            f"`…{_code(left + ''.join(after) + right)}…`"
        )
    return lines


def publishable_diff(fix: FixOutcome) -> str | None:
    diff = fix.diff(TEMPLATE_FILE)
    return diff if _short(diff) else None


def _short(diff: str) -> bool:
    return bool(diff) and all(len(line) <= MAX_DIFF_LINE for line in diff.splitlines())


TEMPLATE_FILE = "chat_template.jinja"
"""The file name in published diffs (the same for every model, so a page does not depend on the id it is
published under)."""


@dataclass
class FixPage:
    """What a model's way-out page says, apart from the model id and file names it is published under: plain
    data, so the matrix can store it with the audit result and publish it again for another id."""

    summary: str
    setting: str | None
    """The recommendation's line, when there is one."""
    fix_offered: bool
    fix_lines: list[str]
    """The fix section (an offered fix) or why none is offered."""
    diff: str | None
    """The unified diff, when it is short enough to publish."""
    training_lines: list[str] = field(default_factory=list)
    """The training form's section: which form goes where, how to train with it, or why none is offered."""
    training_diff: str | None = None
    """The unified diff from the model's own template to the training form, when it is short enough to publish."""
    training_offered: bool = False


def page_of(way: WayOut, report: AuditReport) -> FixPage:
    fix = way.fix
    offered = fix is not None and fix.offered and fix.after is not None
    if offered:
        assert fix is not None
        lines = _fix_section(report, fix)
    elif fix is not None:
        lines = ["## Fix", "", f"None offered: {fix.reason}.", ""]
        if fix.tried:
            lines += [f"Fixes tried (their construct is in the template): {', '.join(fix.tried)}.", ""]
    else:
        lines = []
    training = way.training
    training_diff = training.diff(TEMPLATE_FILE, TRAINING_FILE) if training is not None and training.offered else ""
    return FixPage(
        summary=way.summary,
        setting=way.recommendation.line() if way.recommendation is not None else None,
        fix_offered=offered,
        fix_lines=lines,
        diff=publishable_diff(fix) if offered and fix is not None else None,
        training_lines=training_section(training, patched=offered) if training is not None else [],
        training_diff=training_diff if _short(training_diff) else None,
        training_offered=training is not None and training.offered,
    )


def to_markdown(report: AuditReport, page: FixPage, diff_name: str | None, training_name: str | None = None) -> str:
    model = report.model
    level = "text level (stand-in tokenizer, no vocabulary)" if report.text_level_only else "full (real tokenizer)"
    lines = [
        f"# Way out: {model.model_id} — {page.summary}",
        "",
        f"Audited {level}; seed {report.settings.seed}, {report.settings.count} conversations per variant, "
        f"at most {report.settings.max_turns} assistant turns; template sha256 {model.template_sha256 or '-'}. "
        f"Verdict before: **{report.verdict}**.",
        "",
    ]
    if page.setting is not None:
        lines += ["## Setting", "", page.setting, ""]
    lines += page.fix_lines
    if page.fix_offered and diff_name is not None:
        lines += [
            f"Diff: [{diff_name}]({diff_name}). `tito-audit patch {model.model_id} -o FILE` writes the "
            "patched template.",
            "",
        ]
    elif page.fix_offered:
        lines += [
            f"The diff is not published (the template has long lines); `tito-audit patch "
            f"{model.model_id} -o FILE` writes the patched template and its diff.",
            "",
        ]
    lines += page.training_lines
    if page.training_diff is not None and training_name is not None:
        lines += [f"Training form diff (from the model's own template): [{training_name}]({training_name}).", ""]
    elif page.training_offered:
        lines += [
            f"The training form's diff is not published (the template has long lines); `tito-audit patch "
            f"{model.model_id} -o FILE` writes the training form (to FILE with `.training` before its suffix).",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def _fix_section(report: AuditReport, fix: FixOutcome) -> list[str]:
    assert fix.after is not None and fix.proof is not None
    lines = ["## Fix: " + "; ".join(fix.labels()), ""]
    for applied in fix.applied:
        lines.append(
            f"- `{applied.rule.name}`: {applied.rule.changes}; removes "
            + (", ".join(applied.removed) or "no cause on its own")
            + f". At inference: {applied.rule.at_inference}."
        )
    lines += ["", "Edits:", ""]
    lines += [f"- {line}" for line in edit_windows(fix)]
    if fix.folded:
        lines += ["", FOLDED]
    lines += ["", "| variant | before | after | why not ready after |", "|---|---|---|---|"]
    after = {v.name: v for v in fix.after.variants}
    for variant in report.variants:
        new = after.get(variant.name)
        why = "" if new is None or new.verdict == "ready" else new.verdict_reason.replace("|", "\\|")
        lines.append(f"| `{variant.name}` | {variant.verdict} | {new.verdict if new else '-'} | {why} |")
    lines += ["", fix.proof.summary() + ".", ""]
    return lines


def write(report: AuditReport, page: FixPage, folder: Path, stem: str) -> list[Path]:
    """``<stem>.md`` and, when the page has a publishable diff, ``<stem>.diff`` in ``folder`` (each rewritten
    only when its content changed)."""
    written = []
    diff_name = None
    if page.diff is not None:
        diff_name = f"{stem}.diff"
        written.append(write_if_changed(folder / diff_name, page.diff))
    training_name = None
    if page.training_diff is not None:
        training_name = f"{stem}.training.diff"
        written.append(write_if_changed(folder / training_name, page.training_diff))
    written.append(write_if_changed(folder / f"{stem}.md", to_markdown(report, page, diff_name, training_name)))
    return written


def _code(text: str) -> str:
    return text.replace("`", "'").replace("\n", "\\n").replace("|", "\\|")
