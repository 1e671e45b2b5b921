"""tito-audit: audit chat templates and tokenizers for token-in/token-out (TITO) safety.

``from tito_audit import TitoSession`` gives the training-loop guard (:mod:`tito_audit.session`); it is
imported on first use so that the command line does not pay for it.
"""

from typing import Any

__version__ = "0.1.0"

_SESSION_NAMES = ("TitoSession", "TitoBreak", "TitoBreakWarning", "SessionBreak", "SessionTurn")
__all__ = ["__version__", *_SESSION_NAMES]


def __getattr__(name: str) -> Any:
    if name in _SESSION_NAMES:
        from tito_audit import session

        return getattr(session, name)
    raise AttributeError(f"module 'tito_audit' has no attribute {name!r}")
