"""Command line: one module per command, the options they share declared once (:mod:`.options`), the wiring
between parsing and the library (:mod:`.wiring`), and exit codes decided in one place (:mod:`.outcomes`).

Commands: ``audit``, ``check``, ``matrix``, ``replay``, ``explain``, ``patch``, ``serve``, ``harnesses``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" banner: we never load weights

from tito_audit.cli import audit, check, explain, harnesses, matrix, patch, replay, serve  # noqa: F401  (registers)
from tito_audit.cli.app import app
from tito_audit.cli.outcomes import run


def main() -> None:
    """Entry point of ``tito-audit``."""
    run(app)


__all__ = ["app", "main"]
