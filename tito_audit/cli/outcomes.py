"""The one place where outcomes and errors become exit codes.

0: the command ran and the result is good (``audit``/``explain``: the deciding verdict is ``ready`` or
``ready-tool-only``; ``check``: every requirement holds; ``replay``: the rollouts are consistent; ``patch``:
the way out (the patched template, or the model's own with the setting) reaches a good deciding verdict and the
patch changes nothing else; ``matrix``: the matrix was written).
1: the command ran and the result is bad (a worse verdict, a failed requirement, an inconsistent rollout,
a patch or setting whose deciding verdict is not good, or no way out).
The deciding verdict (:mod:`tito_audit.audit.deciding`): with engines' parsers audited, the one of the engine the
user names, or the worst of them; else the template's. ``check``'s verdict and rollout requirements read the same.
2: the command could not run (bad input, model not found, template missing, an output that cannot be written);
one line on stderr, never a traceback (``TITO_AUDIT_DEBUG=1`` shows one for unexpected errors).
3: ``matrix`` only: the matrix was written, but some rows are ``not audited: audit error`` (an audit raised, or
its worker process died twice).
130: interrupted (Ctrl-C, or SIGTERM as CI time-outs, docker and Kubernetes send it: handled alike): finished work
is kept; ``matrix`` says how many results were stored.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import typer
from rich.console import Console

from tito_audit.audit.deciding import deciding_verdict, good_verdict
from tito_audit.audit.results import AuditReport
from tito_audit.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_VERDICT, AuditError
from tito_audit.outputs import WriteFailed, describe

err = Console(stderr=True)


def exit_code_for(report: AuditReport, engine: str | None = None) -> int:
    """An audit's exit code: 0 when its deciding verdict (:func:`~tito_audit.audit.deciding.deciding_verdict`: the
    named engine's parser verdict, or the worst of the engines' audited, else the template's) is ``ready`` or
    ``ready-tool-only``, else 1."""
    return EXIT_OK if good_verdict(deciding_verdict(report, engine)[1]) else EXIT_VERDICT


def finish(good: bool) -> typer.Exit:
    """The exit of a command that ran: 0 when its result is good, else 1 (raise what this returns)."""
    return typer.Exit(EXIT_OK if good else EXIT_VERDICT)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"terminated (signal {signum})")


def handle_sigterm_as_ctrl_c() -> None:
    """SIGTERM raises ``KeyboardInterrupt`` in the main thread, as Ctrl-C does (only the command line does this:
    the library leaves a trainer's signals alone)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)


def run(app: typer.Typer) -> None:
    """Run ``app``: expected errors become one line on stderr and exit code 2."""
    handle_sigterm_as_ctrl_c()
    try:
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else EXIT_OK)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except AuditError as exc:
        err.print(f"[bold red]error:[/bold red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except WriteFailed as failed:
        err.print(f"error: {failed}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_CANNOT_RUN)
    except OSError as exc:  # a file the command had to read or write: which one, and why
        where = f"{exc.filename}: " if exc.filename else ""
        why = describe(exc, Path(str(exc.filename))) if exc.filename else describe(exc, Path("."))
        err.print(f"error: {where}{why}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_CANNOT_RUN)
    except typer.Abort:
        err.print("error: aborted", highlight=False)
        sys.exit(EXIT_CANNOT_RUN)
    except Exception as exc:  # click usage errors and anything unexpected: one line, never a traceback
        usage = getattr(exc, "format_message", None)
        if usage is not None:
            message = usage()
            if message:  # the command without arguments printed its help: no empty error line after it
                err.print(f"error: {message}", highlight=False, soft_wrap=True)
            sys.exit(EXIT_CANNOT_RUN)
        if os.environ.get("TITO_AUDIT_DEBUG"):
            raise
        err.print(
            f"error: unexpected {type(exc).__name__}: {exc} (set TITO_AUDIT_DEBUG=1 for a traceback)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_CANNOT_RUN)
