"""The typer application every command registers on, and the version flag."""

from __future__ import annotations

from typing import Annotated

import typer

from tito_audit import __version__
from tito_audit.errors import EXIT_OK

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Audit chat templates and tokenizers for token-in/token-out (TITO) safety in multi-turn tool-calling RL.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tito-audit {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """tito-audit: where and why a chat template breaks an append-only token buffer."""
