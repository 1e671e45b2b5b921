"""What the gateway records: the CPU time of a turn's own work (the ``tito`` record's ``gateway_cpu_ms``), and a
session's record (``GET /sessions/{id}``) built from its state as it was when the request came.

A session's record can be tens of MB (a long session with many branches) and its check renders the whole
conversation (``--bridge auto``: :func:`~tito_audit.gateway.turn_steps.finished_view`), so it is built in a worker
thread from a :class:`RecordSource` taken on the event loop: a committed session is never changed again (a turn puts
another in its place) and the tree is copied as it is (:func:`~tito_audit.gateway.branches.snapshot`); the check runs
on a copy, without the session's lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tito_audit.gateway.branches import Tree, branch_records
from tito_audit.gateway.sessions import Pending
from tito_audit.gateway.turn_steps import break_record, finished_view, turn_record
from tito_audit.session import TitoSession

T = TypeVar("T")


class CpuTime:
    """The CPU time of a turn's own work (:func:`time.thread_time` of each call, summed): what the gateway computed
    for it, in worker threads or on the event loop, whatever else ran on the host."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def timed(self, work: Callable[..., T], *args: object) -> T:
        started = time.thread_time()
        try:
            return work(*args)
        finally:
            self.seconds += time.thread_time() - started


@dataclass(frozen=True)
class RecordSource:
    """A session as a record reads it, taken on the event loop."""

    header: dict[str, Any]
    """The record's first fields: the session's id, the server's model, parser and settings, the requests answered."""
    session: TitoSession
    pending: Pending | None
    tree: Tree | None
    """Under ``--on-rewrite branch``, a snapshot of the session's tree; None otherwise."""

    def record(self) -> dict[str, Any]:
        """The record (in a worker thread): the buffer and loss mask with the last answer appended (as ``finish``
        would append it; the session itself stays open), each turn's spans, the breaks, the check of the steps
        bridged without rendering the history, the messages and, under ``--on-rewrite branch``, every branch."""
        view, check = finished_view(self.session, self.pending)
        record = {
            **self.header,
            "buffer": view.buffer,
            "loss_mask": view.loss_mask,
            "logprobs": view.logprobs,
            "turns": [turn_record(t) for t in view.turns],
            "breaks": [break_record(b) for b in view.breaks],
            "check": check,
            "messages": view.messages,
        }
        if self.tree is not None:  # the branch the last request went on, and every branch
            tree = self.tree
            record.update(on_rewrite="branch", branch=tree.active, branches=list(branch_records(tree)))
        return record
