"""The contract's checks, one module each, run in order on one rollout context per conversation.

Each check is a module declaring its :class:`~tito_audit.audit.checks.interface.Check` as ``CHECK``: a ``NAME`` and a
``check(context, outcome)`` function that reads the
:class:`~tito_audit.audit.checks.rollout_context.RolloutContext` (renders, alignments, the simulated rollout) and adds
tallies and located failures to the :class:`~tito_audit.audit.checks.outcome.Outcome`. Failures carry a key
``(phase, index, part, sub-part)`` so reports list them in rollout order: append failures by message
``(0, k, ...)``; for each assistant turn ``j`` the step before it ``(1, j, 0, ...)``, its bridge
``(1, j, 1, ...)``, its completion's roundtrip ``(1, j, 2, ...)`` and its mask ``(1, j, 3, ...)``; whole buffers
``(2, ...)``; literal special tokens by message ``(3, k, ...)``.

Adding a check: a module beside these and its ``CHECK`` in :data:`REGISTRY`.
"""

from __future__ import annotations

from tito_audit.audit.checks import append, bridge, mask, rollout, roundtrip
from tito_audit.audit.checks.interface import Check
from tito_audit.audit.checks.outcome import Outcome
from tito_audit.audit.checks.rollout_context import RolloutContext

REGISTRY: tuple[Check, ...] = (roundtrip.CHECK, append.CHECK, rollout.CHECK, bridge.CHECK, mask.CHECK)
"""The checks, in the contract's order (and the order of each variant's check tables)."""

CHECK_NAMES = tuple(check.name for check in REGISTRY)


def run_checks(context: RolloutContext) -> Outcome:
    """Every registered check on one conversation."""
    outcome = Outcome()
    for registered in REGISTRY:
        registered.run(context, outcome)
    return outcome
