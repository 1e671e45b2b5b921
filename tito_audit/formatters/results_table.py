"""The results ``tito-audit matrix`` prints: a table of its rows when it fits the terminal without splitting a word
(a model id above all), else a block per model (the id on a line of its own, the other columns below it). A model
that was not audited has no level and no causes: its row says why it was not instead.

A column is a header and a function from a matrix row to its cell; a new column is one more entry in
:func:`columns` (a column per engine whose parser gave some row a verdict).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tito_audit.formatters.terminal import verdict_text
from tito_audit.parse import engines
from tito_audit.parse.interface import Engine

AUDITED = "audited"
"""The status of a row whose model was audited (any other status says why it was not, with its ``reason``)."""


class Row(TypedDict):
    """The columns of a matrix row (:class:`tito_audit.matrix.row.MatrixRow`, a stage above) this table reads; the
    ``<engine>_verdict`` and ``<engine>_parser`` columns are read by their computed names."""

    model_id: str
    verdict: str
    status: str
    reason: str
    same_as: str
    audit_level: str
    main_causes: str


def short_reason(reason: str) -> str:
    """The decisive part of a reason: for "not found; tried: a; b; hub (disabled)" the last attempt."""
    if "; tried: " in reason:
        return "not found; " + reason.rsplit("; ", 1)[-1]
    return reason


def _audited(row: Row) -> bool:
    return row["status"] == AUDITED


def _engine_column(row: Row, engine: Engine, part: str) -> str:
    """The text of the column ``<engine>_<part>`` (empty when the row has none)."""
    columns: Mapping[str, object] = row
    return str(columns.get(f"{engine.name}_{part}") or "")


def _model(row: Row) -> Text:
    return Text(row["model_id"])


def _verdict(row: Row) -> Text:
    verdict = verdict_text(row["verdict"] or row["status"])
    if row.get("same_as"):
        verdict.append(f" (same as {row['same_as']})", style="dim")
    return verdict


def _with_parser(engine: Engine) -> Callable[[Row], Text]:
    """The cell of ``engine``'s parser verdict: ``broken (qwen25+qwen3)``, or ``-`` when there is none."""

    def cell(row: Row) -> Text:
        verdict = _engine_column(row, engine, "verdict")
        if not verdict:
            return Text("-", style="dim")
        parser = _engine_column(row, engine, "parser").removeprefix(f"{engine.name} ")
        return verdict_text(verdict).append(f" ({parser})", style="dim")

    return cell


Column = tuple[str, Callable[[Row], Text]]


def columns(rows: Sequence[Row]) -> list[Column]:
    """The model, its verdict, its verdict with each engine's parser (the engines that gave some row one), its level
    and main causes."""
    shown = [engine for engine in engines.ENGINES if any(_engine_column(row, engine, "verdict") for row in rows)]
    return [
        ("model", _model),
        ("verdict", _verdict),
        *((f"with {engine.label}'s parser", _with_parser(engine)) for engine in shown),
        ("level", lambda row: Text(row["audit_level"])),
        ("main causes", _causes),
    ]


def _causes(row: Row) -> Text:
    """The row's main causes; for a model that was not audited, why not (its status says that it was not)."""
    if _audited(row):
        return Text(row["main_causes"])
    return Text(short_reason(row.get("reason") or ""), style="dim")


def results_table(rows: Sequence[Row]) -> Table:
    """The rows as a table; the model column never wraps, the others wrap between words (cut only when the terminal
    is narrower than :func:`narrowest_width`)."""
    table = Table(header_style="bold")
    shown = columns(rows)
    for number, (header, cell) in enumerate(shown):
        table.add_column(header, no_wrap=number == 0, min_width=_longest_word(number, header, cell, rows))
    for row in rows:
        table.add_row(*(cell(row) for _, cell in shown))
    return table


def _longest_word(number: int, header: str, cell: Callable[[Row], Text], rows: Sequence[Row]) -> int:
    texts = [header, *(cell(row).plain for row in rows)]
    words = texts if number == 0 else [word for text in texts for word in text.split()]
    return max(map(len, words), default=0)


def narrowest_width(rows: Sequence[Row]) -> int:
    """The width of the table with each column as wide as its longest word (the model column as its longest id):
    any narrower and a word is cut."""
    shown = columns(rows)
    width = len(shown) + 1  # the vertical rules
    for number, (header, cell) in enumerate(shown):
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
        if not _audited(row):  # no level, no causes: its status and why
            line.append_text(_verdict(row)).append(": ").append_text(_causes(row))
            console.print(line)
            continue
        for number, (header, cell) in enumerate(columns(rows)[1:]):
            line.append(("; " if number else "") + f"{header}: ").append_text(cell(row))
        console.print(line)
