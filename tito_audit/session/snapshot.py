"""A session's state as JSON data, written as the change from one state to the next and read back whole.

A server that keeps its sessions on disk (``tito-audit serve --store``) writes, after each step, only what the step
changed: for each list or text of the session (messages, buffer, loss mask, log-probabilities, the template's view,
turns, breaks) the length of what it kept from the state before and what follows (``[kept, tail]``); a re-render,
which rewrites the buffer, is a shorter ``kept``. Folding the changes in order gives the state back, and
:func:`restore` puts it into a new session of the same model: the same buffer, turns and breaks, exactly (numbers
round-trip through JSON), ready for the next step. The parse cache is not kept (the next parse parses again).
"""

from __future__ import annotations

from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.audit.results import TokenWindow
from tito_audit.session.breaks import SessionBreak
from tito_audit.session.deferred import PendingStep
from tito_audit.session.session import TitoSession
from tito_audit.session.turns import SessionTurn

SEQUENCES = (
    "_messages",
    "_buffer",
    "_mask",
    "_logprobs",
    "_view_ids",
    "_view_text",
    "_sampled_spans",
    "_breaks",
    "_turns",
    "_pending",
)
"""The session's lists and texts, kept as changes (breaks before turns: a turn names its break by index)."""
SCALARS = ("_steps", "_state")


def change(before: TitoSession | None, after: TitoSession) -> dict[str, Any]:
    """What ``after`` changed from ``before`` (None: from nothing), as JSON data."""
    out: dict[str, Any] = {}
    for name in SEQUENCES:
        old = getattr(before, name) if before is not None else ([] if name != "_view_text" else "")
        new = getattr(after, name)
        kept = common_prefix_length(old, new)
        if kept == len(old) == len(new):
            continue
        tail = new[kept:]
        if name == "_breaks":
            tail = [_break_data(b) for b in tail]
        elif name == "_turns":
            tail = [_turn_data(t, after._breaks) for t in tail]
        out[name] = [kept, tail]
    for name in SCALARS:
        if before is None or getattr(before, name) != getattr(after, name):
            out[name] = getattr(after, name)
    if before is None or before.clock != after.clock:
        out["clock"] = after.clock.isoformat()
    return out


def fold(state: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
    """``state`` (JSON data, as :func:`change` writes it; ``{}`` to start) with ``changed`` applied."""
    out = dict(state)
    for name, value in changed.items():
        if name in SEQUENCES:
            kept, tail = value
            out[name] = out.get(name, "" if name == "_view_text" else [])[:kept] + tail
        else:
            out[name] = value
    return out


def restore(session: TitoSession, state: dict[str, Any]) -> TitoSession:
    """``session`` (new, of the same model, tools and policies) given ``state`` (folded changes)."""
    breaks = [_break_of(data) for data in state.get("_breaks", [])]
    session._messages = list(state.get("_messages", []))
    session._buffer = list(state.get("_buffer", []))
    session._mask = list(state.get("_mask", []))
    session._logprobs = list(state.get("_logprobs", []))
    session._view_ids = list(state.get("_view_ids", []))
    session._view_text = state.get("_view_text", "")
    session._sampled_spans = [(begin, end) for begin, end in state.get("_sampled_spans", [])]
    session._breaks = breaks
    session._turns = [_turn_of(data, breaks) for data in state.get("_turns", [])]
    session._pending = [PendingStep(*values) for values in state.get("_pending", [])]
    session._steps = int(state.get("_steps", 0))
    session._state = str(state.get("_state", "new"))
    session._parsed, session._decoded = None, ()
    if "clock" in state:
        session.clock = datetime.fromisoformat(state["clock"])
    return session


def _turn_data(turn: SessionTurn, breaks: list[SessionBreak]) -> dict[str, Any]:
    broke = next((i for i, b in enumerate(breaks) if b is turn.broke), None)
    return {
        "message_index": turn.message_index,
        "sampled": turn.sampled,
        "stopped": turn.stopped,
        "completion": list(turn.completion),
        "bridge": list(turn.bridge),
        "broke": broke,
        "broke_data": _break_data(turn.broke) if turn.broke is not None and broke is None else None,
        "message": turn.message,
        "bridged": turn.bridged,
    }


def _turn_of(data: dict[str, Any], breaks: list[SessionBreak]) -> SessionTurn:
    broke = breaks[data["broke"]] if data.get("broke") is not None else None
    if broke is None and data.get("broke_data") is not None:
        broke = _break_of(data["broke_data"])
    return SessionTurn(
        data["message_index"],
        data["sampled"],
        data["stopped"],
        (data["completion"][0], data["completion"][1]),
        (data["bridge"][0], data["bridge"][1]),
        broke,
        data.get("message"),
        data.get("bridged", "template"),
    )


def _break_data(details: SessionBreak) -> dict[str, Any]:
    return asdict(details)


def _break_of(data: dict[str, Any]) -> SessionBreak:
    known = {f.name for f in fields(SessionBreak)}
    values = {k: v for k, v in data.items() if k in known}
    for name in ("buffer_tokens", "template_tokens"):
        if isinstance(values.get(name), dict):
            values[name] = TokenWindow(**values[name])
    return SessionBreak(**values)
