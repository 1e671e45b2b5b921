"""What a session does when the template cannot be followed: the policies, and the loss mask after a re-render."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, TypedDict

from tito_audit.audit.public import common_prefix_length, stand_in_bridge
from tito_audit.conversations.conversation import Message
from tito_audit.model.render import RenderError
from tito_audit.session.breaks import SessionBreak, render_refused
from tito_audit.session.buffer_logprobs import carried
from tito_audit.session.machinery import Machinery
from tito_audit.session.parsing import ParserArgument
from tito_audit.session.turn_records import PendingTurn

OnBreak = Literal["raise", "warn", "rerender"]
Bridge = Literal["auto", "template", "history-free"]


class SessionOptions(TypedDict):
    """A session's settings besides its model and tools, as :class:`~tito_audit.session.TitoSession` takes them."""

    on_break: OnBreak
    clock: datetime | None
    parser: ParserArgument
    bridge: Bridge
    check_every: int


BRIDGES: dict[str, str] = {
    "auto": (
        "the default: a tool step whose shape the template's proof covers is bridged from a short local render (the "
        "step's own assistant turn and new messages after a stand-in user message), in time that does not grow with "
        "the conversation; every other step is rendered whole as under template; the whole conversation is rendered "
        "again at finish (and every check_every such steps, and at any step rendered whole), and a break found there "
        "is reported at its own step, late, with the same labels (breaks per on_break)"
    ),
    "template": "the template's next prompt after the buffer, checked at every step (breaks per on_break)",
    "history-free": (
        "the suffix the template writes for the new messages after a short stand-in conversation, never rendering "
        "the history (verl, SkyRL): sound exactly when the audit's bridge check holds (history-dependent-suffix)"
    ),
}
POLICIES: dict[str, str] = {
    "raise": "raise TitoBreak; the session is left as it was before the call",
    "warn": (
        "warn (TitoBreakWarning), record the break and keep the buffer append-only: the sampled ids stay, the new "
        "messages are bridged with the template's history-free suffix (a short stand-in conversation), and later "
        "steps are checked against the template's own rendering"
    ),
    "rerender": (
        "record the break and continue from the template's render of the conversation: the buffer becomes "
        "ids(R); the loss mask keeps the tokens before the first changed token and every earlier completion whose "
        "ids appear unchanged, and masks the rest"
    ),
}


def stand_in_suffix(
    machinery: Machinery,
    appended: list[Message],
    tools: list[dict] | None,
    clock: datetime,
    pending: PendingTurn,
    details: SessionBreak,
) -> list[int] | None:
    """``warn``'s bridge: the template's history-free suffix for ``appended``; None (with a note on ``details``)
    when it cannot be had (the stand-in is refused, or the turn was cut without its terminator)."""
    if pending.stopped is False:
        details.notes.append("the turn has no stop token: the stand-in suffix would lack its terminator")
        return None
    try:
        with machinery.lock, machinery.rendering(clock):
            suffix, _ = stand_in_bridge(machinery.setup, appended, tools)
    except RenderError as exc:
        details.notes.append(f"the stand-in suffix could not be rendered ({exc})")
        return None
    return suffix


def history_free_bridge(
    machinery: Machinery, appended: list[Message], tools: list[dict] | None, pending: PendingTurn, step: int
) -> list[int]:
    """``bridge="history-free"``: the stand-in suffix of ``appended`` (rendered under the caller's lock and clock);
    a refused stand-in is a :class:`~tito_audit.session.breaks.TitoBreak` naming the step."""
    if pending.stopped is False:
        raise ValueError(
            "bridge='history-free' needs a completion that ends with a stop token (the stand-in suffix starts after "
            "one); this one was cut by the length limit"
        )
    try:
        suffix, _ = stand_in_bridge(machinery.setup, appended, tools)
    except RenderError as exc:
        raise render_refused(step, len(appended), [str(m.get("role")) for m in appended], exc) from None
    return suffix


def rerendered_mask(
    buffer: list[int], mask: list[int], spans: list[tuple[int, int]], ids: list[int]
) -> tuple[list[int], list[tuple[int, int]]]:
    """The loss mask over ``ids`` (the template's render) and where the sampled spans went: the tokens before the
    first changed one keep their mask, each earlier completion found unchanged further on is masked in again, the
    rest is 0.

    >>> rerendered_mask([5, 6, 7, 8], [0, 1, 1, 0], [(1, 3)], [5, 9, 6, 7])
    ([0, 0, 1, 1], [(2, 4)])
    """
    kept, placed = relocations(buffer, spans, ids)
    return carried(mask, kept, placed, len(ids), 0), [(found, found + end - begin) for begin, end, found in placed]


def relocations(
    buffer: list[int], spans: list[tuple[int, int]], ids: list[int]
) -> tuple[int, list[tuple[int, int, int]]]:
    """Where a re-render leaves the buffer's sampled spans: the length of the common prefix of ``buffer`` and ``ids``,
    and ``(begin, end, found)`` for each span within it (``found == begin``) or found unchanged after it, in order;
    a span found nowhere is left out. The loss mask and the log-probabilities are carried the same way."""
    kept = common_prefix_length(buffer, ids)
    placed: list[tuple[int, int, int]] = []
    position = kept
    for begin, end in spans:
        if end <= kept:
            placed.append((begin, end, begin))
            continue
        found = _find(ids, buffer[begin:end], position)
        if found is not None:
            placed.append((begin, end, found))
            position = found + end - begin
    return kept, placed


def _find(haystack: list[int], needle: list[int], start: int) -> int | None:
    """The first index >= ``start`` where ``needle`` occurs in ``haystack``."""
    if not needle:
        return None
    first, size = needle[0], len(needle)
    index = start
    while True:
        try:
            index = haystack.index(first, index)
        except ValueError:
            return None
        if haystack[index : index + size] == needle:
            return index
        index += 1
