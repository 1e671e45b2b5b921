"""``tito-audit matrix --corpus DIR``: the matrix of a template corpus (see :mod:`tito_audit.matrix.corpus_run`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tito_audit.cli.outcomes import err
from tito_audit.cli.progress import ProgressLines, folder_state, what_changed
from tito_audit.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_ROWS_FAILED, OutputError
from tito_audit.outputs import WriteFailed

if TYPE_CHECKING:
    from tito_audit.matrix.matrix_options import MatrixOptions

CORPUS_COUNT = 32
"""Generated conversations per variant for a corpus run unless ``--count`` says otherwise: the count that keeps a
cold run of the 786-template corpus within 20 minutes on 2 cores (see ``benchmarks/bench_corpus.py``)."""
CORPUS_WAY_OUT_BUDGET = 40
"""Variant audits the way-out search may run per template in a corpus run: the searches of 1 to 5 variants measured
took 2 to 23; a template of 11 variants took 74 s without a budget."""
CORPUS_EXAMPLES_PER_GROUP = 1
"""Failures kept per group on a corpus template's page (counts stay complete): keeps 786 pages small."""


def corpus_command(corpus: Path, options: MatrixOptions, stage_dir: Path, console: Console) -> None:
    """Run and publish the corpus matrix; every entry problem is one line on stderr and the run goes on."""
    from tito_audit.matrix.corpus_run import run_corpus
    from tito_audit.matrix.row import AUDIT_ERROR
    from tito_audit.matrix.run import MatrixInterrupted

    def problem(line: str) -> None:
        err.print(line, highlight=False, soft_wrap=True, markup=False)

    before = folder_state(options.out_dir)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as progress:
        overall = progress.add_task("[bold]corpus templates", total=None)
        lines = ProgressLines(None, noun="corpus templates") if not console.is_terminal else None

        def on_event(event: tuple[str, str, int, int]) -> None:
            if lines is not None:
                lines(event)
            if event[1] == "done":
                progress.advance(overall)

        try:
            run = run_corpus(corpus, options, stage_dir, on_event, problem)
        except WriteFailed as failed:
            raise OutputError(f"--out {failed.path}: {failed.reason}") from failed
        except KeyboardInterrupt as interrupted:  # MatrixInterrupted says what was kept; before it, nothing was
            said = str(interrupted) if isinstance(interrupted, MatrixInterrupted) else ""
            err.print(said or "interrupted while reading the corpus: nothing was audited yet", highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None
    audited = [row for row in run.rows if row["status"] == "audited"]
    console.print(
        f"{len(audited)} of {len(run.rows)} corpus templates audited: {run.audited} in this run, "
        f"{run.from_store} from stored results; {len(run.problems)} corpus entries with a problem",
        highlight=False,
    )
    console.print(what_changed(options.out_dir, before, folder_state(options.out_dir)), highlight=False, soft_wrap=True)
    for note in dict.fromkeys(run.notes[:5]):
        err.print(f"note: {note}", highlight=False, soft_wrap=True)
    failed_names = [row["name"] for row in run.rows if row["status"] == AUDIT_ERROR]
    if failed_names:
        err.print(
            f"{len(failed_names)} templates failed ({AUDIT_ERROR}: {', '.join(failed_names[:3])}"
            f"{', …' if len(failed_names) > 3 else ''})"
            "; see their reason in index.json, run again to retry them",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_ROWS_FAILED)
    raise typer.Exit(EXIT_OK)
