"""The typer application every command registers on, and the version flag."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup

from tito_audit import __version__
from tito_audit.errors import EXIT_OK


# typer's help machinery: its commands, contexts and help formatters are click's, vendored at a private path
# (typer._click), so they are typed Any here
def _readable(command: Any, ctx: Any) -> None:
    """Help that reads at 80 columns: a flag shows no value (``--help``, not ``--help <bool>``) and an argument its
    name alone (``MODEL``, not ``MODEL <str>``); options name their value with a metavar (:mod:`.options`)."""
    helper = command.get_help_option(ctx)
    if helper is not None:
        helper.metavar = ""
    for param in command.params:
        if isinstance(param, TyperArgument):
            # typer's own Argument object (third-party): its help shows no type after the name
            param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
    _plain_text(command)


def _plain_text(command: Any) -> None:
    """The command's help and its options' as written: brackets are text (``[tool.tito-audit]``), not Rich markup,
    and a paragraph's lines are one paragraph that wraps at the terminal's width (once per command)."""
    if getattr(command, "_plain_text", False):
        return
    command._plain_text = True
    if command.help:
        paragraphs = inspect.cleandoc(command.help).split("\n\n")
        command.help = "\n\n".join(escape(" ".join(p.split("\n"))) for p in paragraphs)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = escape(param.help)


class ReadableCommand(TyperCommand):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        _readable(self, ctx)
        super().format_help(ctx, formatter)


class ReadableGroup(TyperGroup):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        _readable(self, ctx)
        for command in self.commands.values():
            _plain_text(command)
        super().format_help(ctx, formatter)


class App(typer.Typer):
    """The application: every command's help as :class:`ReadableCommand` lays it out."""

    def command(self, *args: Any, cls: Any = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or ReadableCommand, **kwargs)


app = App(
    cls=ReadableGroup,
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
        bool, typer.Option("--version", callback=_version, is_eager=True, metavar="", help="Show the version.")
    ] = False,
) -> None:
    """tito-audit: where and why a chat template breaks an append-only token buffer."""
