"""A session's state as JSON data, written as the change from one state to the next and read back whole.

A server that keeps its sessions on disk (``tito-audit serve --store``) writes, after each step, only what the step
changed: for each list or text of the session (messages, buffer, loss mask, log-probabilities, the template's view,
turns, breaks) the length of what it kept from the state before and what follows (``[kept, tail]``); a re-render,
which rewrites the buffer, is a shorter ``kept``. Folding the changes in order gives the state back, and
:func:`restore` hands it to a new session of the same model (:meth:`~tito_audit.session.TitoSession.restore`): the
same buffer, turns and breaks, exactly (numbers round-trip through JSON), ready for the next step. The parse cache
is not kept (the next parse parses again).
"""

from __future__ import annotations

from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

from tito_audit.audit.public import TokenWindow, common_prefix_length
from tito_audit.session.breaks import SessionBreak
from tito_audit.session.session import TitoSession
from tito_audit.session.state import NEW, PendingStep, SessionState
from tito_audit.session.turn_records import SessionTurn

SEQUENCES = {
    "_messages": "messages",
    "_buffer": "buffer",
    "_mask": "mask",
    "_logprobs": "logprobs",
    "_view_ids": "view_ids",
    "_view_text": "view_text",
    "_sampled_spans": "sampled_spans",
    "_breaks": "breaks",
    "_turns": "turns",
    "_pending": "pending",
}
"""The state's lists and texts, kept as changes, by the name stored (breaks before turns: a turn names its break by
index); the stored names are those of stores already written."""
SCALARS = {"_steps": "steps", "_state": "phase"}


def change(before: TitoSession | None, after: TitoSession) -> dict[str, Any]:
    """What ``after`` changed from ``before`` (None: from nothing), as JSON data."""
    old_state, new_state = (before.state if before is not None else None), after.state
    out: dict[str, Any] = {}
    for stored, name in SEQUENCES.items():
        old = getattr(old_state, name) if old_state is not None else ([] if name != "view_text" else "")
        new = getattr(new_state, name)
        kept = common_prefix_length(old, new)
        if kept == len(old) == len(new):
            continue
        tail = new[kept:]
        if name == "breaks":
            tail = [_break_data(b) for b in tail]
        elif name == "turns":
            tail = [_turn_data(t, new_state.breaks) for t in tail]
        out[stored] = [kept, tail]
    for stored, name in SCALARS.items():
        if old_state is None or getattr(old_state, name) != getattr(new_state, name):
            out[stored] = getattr(new_state, name)
    if before is None or before.clock != after.clock:
        out["clock"] = after.clock.isoformat()
    if before is None or before.origin != after.origin:
        out["_origin"] = after.origin
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
    """``session`` (new, of the same model, tools and policies: another is refused) given ``state`` (folded
    changes)."""
    session.restore(state_of(state))
    if "clock" in state:
        session.clock = datetime.fromisoformat(state["clock"])
    return session


def state_of(data: dict[str, Any]) -> SessionState:
    """The :class:`SessionState` that folded changes describe (no caches: the next parse parses again)."""
    breaks = [_break_of(item) for item in data.get("_breaks", [])]
    return SessionState(
        messages=list(data.get("_messages", [])),
        buffer=list(data.get("_buffer", [])),
        mask=list(data.get("_mask", [])),
        logprobs=list(data.get("_logprobs", [])),
        view_ids=list(data.get("_view_ids", [])),
        view_text=data.get("_view_text", ""),
        sampled_spans=[(begin, end) for begin, end in data.get("_sampled_spans", [])],
        turns=[_turn_of(item, breaks) for item in data.get("_turns", [])],
        breaks=breaks,
        pending=[PendingStep(*values) for values in data.get("_pending", [])],
        steps=int(data.get("_steps", 0)),
        phase=str(data.get("_state", NEW)),
        origin=data.get("_origin"),  # None in a store written before origins were kept: taken as it is
    )


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
