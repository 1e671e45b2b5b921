"""The parsers an audit runs, chosen while it renders.

Choosing them takes seconds that are mostly waiting: SGLang's parsers import in about a second, and vLLM's run in a
worker process that imports vLLM (5 s alone on two cores, more on a busy machine) and loads the model's tokenizer
before it answers. The checks of the template's own rollout need no parser, so the audit walks its conversations
meanwhile (:meth:`tito_audit.audit.variant.VariantAudit.walk`) and runs the parse step of what it walked once the
parsers are known. :class:`PendingPlan` runs :func:`~tito_audit.parse.choice.choose_parsers` in a thread of its own
(it waits on the worker's pipe, without the interpreter's lock, while this thread renders) and hands over its plan, or
its error, unchanged; :class:`ParseSteps` holds the parse steps of the conversations walked before it is known and
runs every step in the order the conversations were walked, across variants, as an audit that chose its parsers
first runs them: the report is the same.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from tito_audit.parse.choice import ParserPlan, choose_parsers
from tito_audit.parse.parser import CompletionParser


class PendingPlan:
    """A :class:`~tito_audit.parse.choice.ParserPlan` being chosen in a thread (:meth:`start`), or one already known
    (:meth:`known_now`)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._plan: ParserPlan | None = None
        self._error: BaseException | None = None
        self._parsers: list[CompletionParser] | None = None

    @classmethod
    def start(cls, value: Any, model_id: str, tokenizer: Any, model_dir: Path | None) -> PendingPlan:
        """Choose the parsers ``value`` names for the model (see :func:`~tito_audit.parse.choice.choose_parsers`) in a
        daemon thread: the process never waits for it to end (an interrupted audit leaves it behind; the worker it
        waits on is ended at exit)."""
        pending = cls()
        thread = threading.Thread(
            target=pending._choose,
            args=(lambda: choose_parsers(value, model_id, tokenizer, model_dir),),
            name="tito-audit-parser-choice",
            daemon=True,
        )
        thread.start()
        return pending

    @classmethod
    def known_now(cls, parsers: Sequence[CompletionParser]) -> PendingPlan:
        """The parsers an audit was given (its plan: none)."""
        pending = cls()
        pending._plan = ParserPlan(())
        pending._parsers = list(parsers)
        pending._done.set()
        return pending

    def _choose(self, choose: Callable[[], ParserPlan]) -> None:
        try:
            self._plan = choose()
        except BaseException as exc:  # handed to whoever asks for the plan, in its own thread
            self._error = exc
        finally:
            self._done.set()

    def known(self) -> bool:
        """Whether the plan (or its error) is there, without waiting."""
        return self._done.is_set()

    def plan(self) -> ParserPlan:
        """The plan, once chosen (waits; raises what choosing it raised)."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._plan is not None
        return self._plan

    def parsers(self) -> list[CompletionParser]:
        plan = self.plan()
        return self._parsers if self._parsers is not None else plan.parsers


ParseStep = Callable[[list[CompletionParser]], None]
"""One walked conversation's parse step, given the parsers."""


class ParseSteps:
    """The parse steps of an audit's walked conversations, run in the order they were walked (see the module
    docstring): at once when the parsers are known, else kept until they are."""

    def __init__(self, plan: PendingPlan, within: Callable[[], AbstractContextManager[Any]]) -> None:
        """``within``: the block every step runs in (the template's frozen clock)."""
        self.plan = plan
        self._within = within
        self._kept: list[ParseStep] = []

    def add(self, step: ParseStep) -> None:
        if not self.plan.known():
            self._kept.append(step)
            return
        self._run_kept()
        step(self.plan.parsers())

    def finish(self) -> ParserPlan:
        """Wait for the plan, run every step kept, and give the plan."""
        plan = self.plan.plan()
        self._run_kept()
        return plan

    def _run_kept(self) -> None:
        if not self._kept:
            return
        parsers = self.plan.parsers()
        kept, self._kept = self._kept, []
        with self._within():
            for step in kept:
                step(parsers)
