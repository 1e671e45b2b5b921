"""The audit: a loaded model and its conversations in; an :class:`~tito_audit.audit.results.AuditReport` out.

The modules and packages here are the audit's own steps. :mod:`.service` audits each variant of the template's
settings (:mod:`.audit_options`: the settings and each variant's conversations; :mod:`.settings_together`: the
pairs read together; :mod:`.generation`: what a model behind the variant writes). Per variant (:mod:`.variant`):
accept each conversation and realize its turns (:mod:`.realization`), simulate the rollout and run the checks
(:mod:`.checks`), the rollout again with each engine's parser (:mod:`.parse_step`), the findings
(:mod:`.findings`), then the check tables (:mod:`.aggregate`), the verdict (:mod:`.verdict`) with when it breaks
(:mod:`.conditions`), the recommended setting (:mod:`.recommend`) and which verdict decides (:mod:`.deciding`).
Below every step, :mod:`.core` decides a buffer against the next prompt and labels where they part (the session
reads it too); :mod:`.results` and :mod:`.engine_result` are the report's dataclasses, :mod:`.serialization`
reads them back from JSON.
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
