"""The TITO guard for training loops: :class:`TitoSession` keeps one append-only token buffer per rollout and
checks every step against the model's template with the audit's own machinery."""

from tito_audit.session.breaks import RenderRefused, SessionBreak, TitoBreak, TitoBreakWarning
from tito_audit.session.policies import POLICIES
from tito_audit.session.session import TitoSession
from tito_audit.session.turn_records import SessionTurn

__all__ = ["POLICIES", "RenderRefused", "SessionBreak", "SessionTurn", "TitoBreak", "TitoBreakWarning", "TitoSession"]
