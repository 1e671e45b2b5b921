"""tito-audit: audit chat templates and tokenizers for token-in/token-out (TITO) safety.

The package reads as the path of data: ``model`` (a model id to a tokenizer, template and renders) →
``conversations`` → ``audit`` (checks, findings, verdict) → ``repair`` (explain, fixes), ``session`` (the guard in
the training loop, replay) and ``gate`` (CI requirements) → ``formatters`` → ``matrix`` (the published matrix) →
``cli``.

The entry points are exported here and imported on first use, so that ``tito-audit --help`` pays for none of
them: ``TitoSession`` (the training-loop guard), ``AuditOptions``, ``load_by_id``, ``load_model``,
``resolve_model``; the audit itself is ``from tito_audit.audit import audit`` (``tito_audit.audit`` is its
package).
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "TitoSession": "tito_audit.session",
    "TitoBreak": "tito_audit.session",
    "TitoBreakWarning": "tito_audit.session",
    "SessionBreak": "tito_audit.session",
    "SessionTurn": "tito_audit.session",
    "AuditOptions": "tito_audit.audit.service",
    "load_by_id": "tito_audit.model.load_by_id",
    "load_model": "tito_audit.model.load_folder",
    "resolve_model": "tito_audit.model.resolve",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tito_audit' has no attribute {name!r}")
