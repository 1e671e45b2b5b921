"""The results ``tito-audit matrix`` prints: a table of its rows when it fits the terminal without splitting a word
(a model id above all), else a block per model (the id on a line of its own, the other columns below it).

A column is a header and a function from a matrix row to its cell; a new column is one more entry in
:data:`COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tito_audit.formatters.terminal import verdict_text

Row = dict[str, Any]


def _model(row: Row) -> Text:
    return Text(row["model_id"])


def _verdict(row: Row) -> Text:
    verdict = verdict_text(row["verdict"] or row["status"])
    if row.get("same_as"):
        verdict.append(f" (same as {row['same_as']})", style="dim")
    return verdict


def _with_parser(row: Row) -> Text:
    if not row.get("parser_verdict"):
        return Text("-", style="dim")
    return verdict_text(row["parser_verdict"]).append(f" ({row['parser']})", style="dim")


COLUMNS: tuple[tuple[str, Callable[[Row], Text]], ...] = (
    ("model", _model),
    ("verdict", _verdict),
    ("with its engine's parser", _with_parser),
    ("level", lambda row: Text(row["audit_level"])),
    ("main causes", lambda row: Text(row["main_causes"])),
)


def results_table(rows: Sequence[Row]) -> Table:
    """The rows as a table; the model column never wraps, the others wrap between words (cut only when the terminal
    is narrower than :func:`narrowest_width`)."""
    table = Table(header_style="bold")
    for number, (header, cell) in enumerate(COLUMNS):
        table.add_column(header, no_wrap=number == 0, min_width=_longest_word(number, header, cell, rows))
    for row in rows:
        table.add_row(*(cell(row) for _, cell in COLUMNS))
    return table


def _longest_word(number: int, header: str, cell: Callable[[Row], Text], rows: Sequence[Row]) -> int:
    texts = [header, *(cell(row).plain for row in rows)]
    words = texts if number == 0 else [word for text in texts for word in text.split()]
    return max(map(len, words), default=0)


def narrowest_width(rows: Sequence[Row]) -> int:
    """The width of the table with each column as wide as its longest word (the model column as its longest id):
    any narrower and a word is cut."""
    width = len(COLUMNS) + 1  # the vertical rules
    for number, (header, cell) in enumerate(COLUMNS):
        width += _longest_word(number, header, cell, rows) + 2  # one space of padding on each side
    return width


def print_results(rows: Sequence[Row], console: Console) -> None:
    """The table when it fits ``console``'s width without cutting a word, else a block per model."""
    if narrowest_width(rows) <= console.width:
        console.print(results_table(rows))
        return
    for row in rows:
        console.print(Text(row["model_id"], style="bold"), soft_wrap=True)
        line = Text("  ")
        for number, (header, cell) in enumerate(COLUMNS[1:]):
            line.append(("; " if number else "") + f"{header}: ").append_text(cell(row))
        console.print(line)
