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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

from tito_audit.gateway.branches import PER_POSITION, Tree, snapshot
from tito_audit.gateway.samples import Sample, active_sample, branch_records, breaks_of, samples
from tito_audit.gateway.session_entry import Pending
from tito_audit.gateway.sessions import SessionStore
from tito_audit.gateway.turn_steps import finished_view, turn_record, unchecked_view
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
    sampled: int = 0
    """Ids the engine sampled for the session, every answer it kept counted."""
    lost: dict[str, int] = field(default_factory=dict)
    """Sampled ids no sample keeps, by cause, as the session table counted them (an answer sampled again in place)."""

    def record(self) -> dict[str, Any]:
        """The record (in a worker thread): the buffer and loss mask with the last answer appended (as ``finish``
        would append it; the session itself stays open), each turn's spans, the breaks (each with its maker), the
        check of the steps bridged without rendering the history, the messages, the assistant turns the gateway
        never sampled and ``trainable``; under ``--on-rewrite branch``, every branch as a training sample, the top
        level being the branch the last request went on."""
        if self.tree is not None:
            branches = list(branch_records(self.tree))
            active = next(b for b in branches if b["branch"] == self.tree.active)
            sample = active_sample(self.tree)
            record = {**self.header, **{name: active[name] for name in PER_POSITION}}
            record.update(
                turns=active["turns"],
                breaks=breaks_of(sample),
                check=active["check"],
                messages=active["messages"],
                unsampled=active["unsampled"],
                trainable=self._trainable([b["trainable"] for b in branches]),
                branch=self.tree.active,
                branches=branches,
            )
            return record
        view, check = finished_view(self.session, self.pending)
        sample = Sample(0, None, view, check, [True] * len(view.turns), None)
        return {
            **self.header,
            "buffer": view.buffer,
            "loss_mask": view.loss_mask,
            "logprobs": view.logprobs,
            "turns": [{**turn_record(t), "in_loss": True} for t in view.turns],
            "breaks": breaks_of(sample),
            "check": check,
            "messages": view.messages,
            "unsampled": sample.unsampled(),
            "trainable": self._trainable([self._counts(sample)], kept_by_session=True),
        }

    def trainable(self) -> dict[str, Any]:
        """The session's ``trainable`` summary alone (``GET /sessions``), without the check a record runs."""
        if self.tree is not None:
            return self._trainable([self._counts(sample) for sample in samples(self.tree, checked=False)])
        view, check = unchecked_view(self.session, self.pending)
        sample = Sample(0, None, view, check, [True] * len(view.turns), None)
        return self._trainable([self._counts(sample)], kept_by_session=True)

    @staticmethod
    def _counts(sample: Sample) -> dict[str, Any]:
        sampled, kept, lost = sample.counts()
        return {"sampled": sampled, "in_loss": kept, "lost": lost}

    def _trainable(self, branches: list[dict[str, Any]], kept_by_session: bool = False) -> dict[str, Any]:
        """``{"sampled", "in_loss", "lost": {cause: ids}}`` over the samples ``branches`` count: every id the engine
        sampled for the session, those in the loss of a sample, and the others by cause. ``kept_by_session``: a
        session that only appends, whose own turns hold every answer it kept (``--store`` reads them back), so the
        ids sampled are those plus the ones the table counted lost."""
        in_loss = sum(b["in_loss"] for b in branches)
        lost = dict(self.lost)
        for counts in branches:
            for cause, ids in counts["lost"].items():
                lost[cause] = lost.get(cause, 0) + ids
        sampled = self.sampled
        if kept_by_session:
            sampled = sum(b["sampled"] for b in branches) + sum(self.lost.values())
        rest = sampled - in_loss - sum(lost.values())
        if rest > 0:
            lost[UNEXPLAINED] = rest
        return {"sampled": sampled, "in_loss": in_loss, "lost": lost}


UNEXPLAINED = "unexplained"
"""The cause of sampled ids no sample keeps that nothing above accounts for (a record says so rather than hide them)."""


def listing(store: SessionStore, after: int, limit: int) -> dict[str, Any]:
    """``GET /sessions``: a page of the sessions that answered a turn, in the order they opened (``after``: the
    ``next`` of the page before), each with its turns, branches, times and ``trainable`` summary (counted, nothing
    rendered)."""
    entries = store.listing(after, limit + 1)
    page = entries[:limit]
    sessions = []
    for entry in page:
        if entry.session is None:
            continue
        tree = snapshot(entry.tree) if entry.tree is not None else None
        source = RecordSource({}, entry.session, entry.pending, tree, entry.sampled, dict(entry.lost))
        sessions.append(
            {
                "session": entry.id,
                "turns": entry.requests,
                "branches": len(tree.tips) if tree is not None else 1,
                "created": _iso(entry.created),
                "last_used": _iso(entry.last_used),
                "trainable": source.trainable(),
            }
        )
    more = len(entries) > limit
    return {"sessions": sessions, "next": page[-1].number if more and page else None}


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")
