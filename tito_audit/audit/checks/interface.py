"""What a check is: the one shape every check module declares (its ``CHECK``), and :func:`~.run_checks` runs.

A check module holds its name (``NAME``: the contract's name of the check and of its table) and a
``check(context, outcome)`` function that reads the
:class:`~tito_audit.audit.checks.rollout_context.RolloutContext` and adds tallies and located failures to the
:class:`~tito_audit.audit.checks.outcome.Outcome`; it declares them together as ``CHECK = Check(NAME, check)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tito_audit.audit.checks.outcome import Outcome
from tito_audit.audit.checks.rollout_context import RolloutContext


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[RolloutContext, Outcome], None]
