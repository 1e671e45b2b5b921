"""The audit: a loaded model and its conversations in; an :class:`~tito_audit.audit.results.AuditReport` out.

Its parts sit in three layers, each importing only the ones below it (``tests/test_layout.py`` checks there is no
circle among them). At the bottom, the report's types (:mod:`.results` with :mod:`.engine_result`,
:mod:`.written_result` and :mod:`.result_conditions`; :mod:`.audit_options`, the settings) and :mod:`.core`, which
decides a buffer against the next prompt and labels where they part (the session reads it too). Above them, the
steps: accept each conversation and realize its turns (:mod:`.realization`; :mod:`.generation`: what a model behind
the variant writes), simulate the rollout and run the checks (:mod:`.checks`), the rollout again with each engine's
parser (:mod:`.parse_step`), the findings (:mod:`.findings`), then the check tables (:mod:`.aggregate`), the verdict
(:mod:`.verdict`) with when it breaks (:mod:`.conditions`), the recommended setting (:mod:`.recommend`), which verdict
decides (:mod:`.deciding`), the pairs of settings read together (:mod:`.settings_together`); :mod:`.serialization`
reads a report back from JSON. On top, the orchestrators: :mod:`.service` audits each variant of the template's
settings with :mod:`.variant`, :mod:`.disagreement` puts the engines' parsers side by side on the same completions,
and :mod:`.public` is what a loop at run time (the session) reads of the audit.
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
