"""Selections shared by the formatters: where a failure is, its windows, its rewritten message, in words (which failure
is each cause's first example is :func:`tito_audit.repair.explanations.first_example_per_cause`: the explanations
explain the same failures)."""

from __future__ import annotations

from tito_audit.audit.core.causes import gen_prompt_mismatch
from tito_audit.audit.core.diff import WINDOW_CHARS
from tito_audit.audit.results import AuditReport, Failure, TokenWindow, UnrealizableTurns, VariantResult


def location(failure: Failure) -> str:
    roles = "+".join(failure.roles) if failure.roles else "-"
    where = f"{failure.conversation_id} message {failure.turn} ({roles})"
    if failure.token_index is not None:
        where += f", token {failure.token_index}"
    if failure.char_index is not None:
        where += f", char {failure.char_index}"
    return where


def texts_at_difference(failure: Failure, before: int = 0, after: int = 100) -> tuple[str, str] | None:
    """Both text windows of ``failure`` from ``before`` characters before their first differing character to
    ``after`` characters past it (None when the failure has no text windows). The records keep
    :data:`~tito_audit.audit.core.diff.WINDOW_CHARS` characters either side of ``char_index``; every format cuts its
    example here, so that both sides always show where they part."""
    if failure.char_index is None or not (failure.expected_text or failure.actual_text):
        return None
    at = min(WINDOW_CHARS, failure.char_index)
    start = max(0, at - before)
    return failure.expected_text[start : at + after], failure.actual_text[start : at + after]


def rewritten_message(failure: Failure) -> str:
    """Which message's rendering changed, in words (empty when the divergence belongs to no message)."""
    if failure.message_index is None:
        if gen_prompt_mismatch.NAME in failure.causes:
            return "the divergence lies in a generation prompt"
        return ""
    when = "the last message" if failure.message_was_last else "not the last message"
    return f"message {failure.message_index} ({failure.message_role}) is rewritten; it was {when} when first rendered"


def unrealizable_line(group: UnrealizableTurns) -> str:
    """One line per group of turns no model could produce in their original form under this variant."""
    return (
        f"not realizable ×{group.count} turns in {group.conversations} conversations: {group.original} "
        f"({group.reason}; prompt ends {visible(group.prompt[-40:])!r}) — audited with {group.audited_as} "
        f"(e.g. {group.example_conversation} message {group.example_turn})"
    )


UNKNOWN_STOPS = (
    "unknown: no generation config, tokenizer eos, registry fact or turn terminator the template writes names one "
    "(each completion is the whole generated text)"
)


def stop_tokens_line(variant: VariantResult, code: bool = False) -> str:
    """The variant's stop tokens with their sources, or why they are unknown."""
    if not variant.stop_tokens:
        return UNKNOWN_STOPS
    quote = "`" if code else ""
    return ", ".join(f"{quote}{visible(s.text)}{quote} ({s.id}; {'; '.join(s.sources)})" for s in variant.stop_tokens)


def drift_line(variant: VariantResult) -> str:
    d = variant.drift
    if not d.steps and not d.rollouts:
        return "no step could be followed by a buffer, so no drift was measured"
    return (
        f"buffer as sampled is not a prefix of the re-rendered ids at {d.canonical_drift_steps}/{d.steps} steps "
        f"(canonical completions) and {d.noncanonical_drift_steps}/{d.steps} (non-canonical); "
        f"a re-rendering trainer would train on {d.mismatched_tokens} of {d.total_tokens} tokens the model never "
        f"sampled ({d.mismatched_tokens_noncanonical} with non-canonical sampling)"
    )


def visible(text: str) -> str:
    """Whitespace made visible, so token windows can be read: ``"a\\n"`` -> ``a\\n``."""
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def window_tokens(window: TokenWindow | None) -> list[str]:
    return [visible(t) for t in window.texts] if window is not None else []


def differing_positions(expected: TokenWindow | None, actual: TokenWindow | None) -> set[int]:
    """Positions (within the windows) where the two sides' ids differ."""
    if expected is None or actual is None:
        return set()
    length = max(len(expected.ids), len(actual.ids))
    return {
        i for i in range(length) if i >= len(expected.ids) or i >= len(actual.ids) or expected.ids[i] != actual.ids[i]
    }


SIDE_LABELS = {
    "append": ("render(M[:k])", "render(M[:k+1])"),
    "rollout": ("token buffer (sampled + bridges)", "template's next prompt R"),
    "bridge": ("real bridge", "stand-in suffix"),
    "roundtrip": ("ids", "re-encoded / as encoded"),
    "mask": ("to train: what the model sampled", "the template's mask trains"),
}


def side_labels(failure: Failure) -> tuple[str, str]:
    """What the two sides of a failure's evidence are, in the words of docs/contract.md."""
    if failure.aspect == "control-token":
        return ("text as plain tokens", "text as the tokenizer encodes it")
    return SIDE_LABELS.get(failure.check, ("earlier", "later"))


def tools_line(report: AuditReport) -> str | None:
    """``set_alarm, get_time (from tools.json)``: the tools the generated conversations declared and called (None
    when none were generated)."""
    settings = report.settings
    if not settings.tools:
        return None
    names = ", ".join(settings.tools)
    return f"{names} (built in)" if settings.tools_source == "built-in" else f"{names} (from {settings.tools_source})"
