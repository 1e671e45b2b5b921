"""The parsers an audit runs, chosen while it renders.

Choosing them takes seconds that are mostly waiting: SGLang's parsers import in about a second, and vLLM's run in a
worker process that imports vLLM (5 s alone on two cores, more on a busy machine) and loads the model's tokenizer
before it answers. The checks of the template's own rollout need no parser, so the audit walks its conversations
meanwhile (:meth:`tito_audit.audit.variant.VariantAudit.walk`) and runs the parse step of what it walked once the
parsers are known. :class:`PendingPlan` runs :func:`~tito_audit.parse.choice.choose_parsers` in a thread of its own
(it waits on the worker's pipe, without the interpreter's lock, while this thread renders) and hands over its plan, or
its error, unchanged: the report is the same as when the parsers were chosen first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
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
    def known_now(cls, plan: ParserPlan) -> PendingPlan:
        pending = cls()
        pending._plan = plan
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
        return self.plan().parsers
