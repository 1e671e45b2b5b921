"""The audit: a loaded model and its conversations in; an :class:`~tito_audit.audit.results.AuditReport` out.

Per variant (:mod:`.variant`): accept each conversation, realize its turns, simulate the rollout and run the
checks (:mod:`.checks`), then the findings (:mod:`.findings`), the verdict and the recommended setting.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {"audit": "tito_audit.audit.service", "AuditOptions": "tito_audit.audit.service"}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """``from tito_audit.audit import audit, AuditOptions`` (imported on first use)."""
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tito_audit.audit' has no attribute {name!r}")
