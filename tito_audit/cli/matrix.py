"""``tito-audit matrix [MODELS]...``: audit many models in parallel and write the compatibility matrix."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tito_audit.cli.app import app
from tito_audit.cli.options import (
    CacheOpt,
    LimitOpt,
    MirrorOpt,
    NoHubOpt,
    ParserOpt,
    Sampling,
    check_mirrors,
    with_option_groups,
)
from tito_audit.cli.outcomes import err
from tito_audit.cli.progress import ProgressLines, folder_state, what_changed
from tito_audit.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_ROWS_FAILED, BadInputError, OutputError
from tito_audit.matrix.matrix_options import BACKENDS, DEFAULT_AUDIT_SECONDS, LOCAL
from tito_audit.outputs import WriteFailed

if TYPE_CHECKING:
    from tito_audit.matrix.run import MatrixOptions, MatrixRun

# The matrix machinery is imported when the command runs (``tito-audit --help`` needs none of it).

ModelsArg = Annotated[
    list[str] | None,
    typer.Argument(metavar="MODELS", help="Model ids or folders (default: every model of the family registry)."),
]
ModelsFileOpt = Annotated[
    Path | None, typer.Option("--models-file", metavar="FILE", help="A file with one model id per line (# comments).")
]
OutOpt = Annotated[Path, typer.Option("--out", metavar="DIR", help="Output folder.")]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", min=1, help="Worker processes (default: the number of cores).")]
RealConversationsOpt = Annotated[
    list[str],
    typer.Option(
        "--conversations", metavar="SOURCE", help="Real trajectories for the combined-audit column (repeatable)."
    ),
]
DEFAULT_JOBS = os.cpu_count() or 1
ReadmeOpt = Annotated[
    Path | None, typer.Option("--update-readme", metavar="FILE", help="Rewrite the matrix block of this README.")
]
FromHubOpt = Annotated[
    str | None,
    typer.Option(
        "--from-hub",
        metavar="FILTER",
        help="Add the Hub's chat models matching FILTER, key=value pairs joined by commas (author=ORG, tag=TAG, "
        "search=TEXT, sort=downloads, limit=N); needs network.",
    ),
]
ResultsCacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--results-cache",
        metavar="DIR",
        help="Folder of stored audit results, keyed by file digests, settings and tool version "
        "(default: results/ in the cache folder; also TITO_AUDIT_RESULTS_CACHE).",
    ),
]
NoResultsCacheOpt = Annotated[
    bool, typer.Option("--no-results-cache", help="Audit every pair afresh and store nothing (one run only).")
]
BackendOpt = Annotated[
    str,
    typer.Option(
        "--backend",
        metavar="NAME",
        help="Where audits run: local (worker processes) or ray (local Ray, or RAY_ADDRESS's cluster).",
    ),
]
CorpusOpt = Annotated[
    Path | None,
    typer.Option(
        "--corpus",
        metavar="DIR",
        help="A template corpus (index.json + templates/): audit and publish every template instead of model ids; "
        "token level where a --mirror folder holds the vocabulary of a model that ships the template.",
    ),
]
AuditSecondsOpt = Annotated[
    float,
    typer.Option(
        "--audit-seconds",
        metavar="SECONDS",
        min=0,
        help="CPU-time limit of one model's audit in a worker process (0: none): the work it does, not the wall "
        "clock; past it the worker is replaced and the row keeps its previous result with a note.",
    ),
]
RESULTS_CACHE_ENV = "TITO_AUDIT_RESULTS_CACHE"
NOTES_SHOWN = 5
"""Results-store notes printed after the summary (the rest are counted)."""


def results_cache_folder(given: Path | None, disabled: bool, cache_dir: Path | None) -> Path | None:
    """``--results-cache``, else ``TITO_AUDIT_RESULTS_CACHE``, else ``results/`` in the download cache."""
    from tito_audit.model.resolve import default_cache_dir

    if disabled:
        return None
    if given is not None:
        return given
    if os.environ.get(RESULTS_CACHE_ENV):
        return Path(os.environ[RESULTS_CACHE_ENV]).expanduser()
    return (cache_dir or default_cache_dir()) / "results"


def read_models_file(path: Path) -> list[str]:
    """Model ids, one per line; ``#`` starts a comment. A file without any id is refused (an empty list would
    silently mean the whole registry)."""
    from tito_audit.inputs import MAX_LIST_BYTES, read_text

    lines = read_text(path, "--models-file", MAX_LIST_BYTES).splitlines()
    ids = [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]
    if not ids:
        raise BadInputError(f"--models-file {path}: no model ids in {path}")
    return ids


@app.command("matrix")
@with_option_groups
def matrix_command(
    sampling: Sampling,
    models: ModelsArg = None,
    models_file: ModelsFileOpt = None,
    out: OutOpt = Path("reports"),
    jobs: JobsOpt = DEFAULT_JOBS,
    mirror: MirrorOpt = [],  # noqa: B006
    cache_dir: CacheOpt = None,
    no_hub: NoHubOpt = False,
    conversations: RealConversationsOpt = [],  # noqa: B006
    limit: LimitOpt = None,
    readme: ReadmeOpt = None,
    from_hub: FromHubOpt = None,
    results_cache: ResultsCacheOpt = None,
    no_results_cache: NoResultsCacheOpt = False,
    backend: BackendOpt = LOCAL,
    parser: ParserOpt = "auto",
    corpus: CorpusOpt = None,
    audit_seconds: AuditSecondsOpt = DEFAULT_AUDIT_SECONDS,
) -> None:
    """Audit many models in parallel and write the compatibility matrix (md, csv, json, parquet, html)."""
    from tito_audit.matrix.hub_listing import list_hub_models, parse_filter
    from tito_audit.matrix.row import AUDIT_ERROR, KEPT, failed_in_this_run
    from tito_audit.matrix.run import MatrixInterrupted, MatrixOptions
    from tito_audit.matrix.tables import update_readme, write_matrix
    from tito_audit.model.registry import registry_model_ids

    console = Console()
    check_mirrors(mirror)
    chosen = list(models or [])
    if models_file is not None:
        chosen += read_models_file(models_file)
    if backend not in BACKENDS:
        raise BadInputError(f"--backend {backend}: choose {' or '.join(BACKENDS)}")
    from tito_audit.parse.choice import check_parser_value

    check_parser_value(parser)
    if corpus is not None and (chosen or from_hub is not None or readme is not None):
        raise BadInputError("--corpus audits the corpus's templates: give no model ids, --from-hub or --update-readme")
    if from_hub is not None:
        chosen += list_hub_models(parse_filter(from_hub))
    given = bool(chosen)
    if not chosen:
        chosen = registry_model_ids()
    options = MatrixOptions(
        parser=parser,
        out_dir=out,
        mirrors=list(mirror),
        cache_dir=cache_dir,
        allow_hub=not no_hub,
        seed=sampling.seed if sampling.seed is not None else 0,
        count=sampling.count if sampling.count is not None else MatrixOptions.count,
        max_turns=sampling.max_turns,
        jobs=jobs,
        conversation_sources=list(conversations),
        conversations_limit=limit,
        results_cache=results_cache_folder(results_cache, no_results_cache, cache_dir),
        backend=backend,
        audit_seconds=audit_seconds,
    )
    if corpus is not None:
        _corpus(corpus, options, sampling.count is None, cache_dir, console)
    before = folder_state(out)
    try:
        run = _run_with_progress(chosen, options, console)
        rows = run.rows
        write_matrix(rows, out, options.settings_record(sorted(set(chosen)) if given else "registry"))
    except WriteFailed as failed:
        raise OutputError(f"--out {failed.path}: {failed.reason}") from failed
    except MatrixInterrupted as interrupted:  # what was kept, in one line; typer would say nothing
        err.print(str(interrupted), highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if readme is not None:
        try:
            update_readme(readme, rows)
        except WriteFailed as failed:
            raise OutputError(f"--update-readme {failed.path}: {failed.reason}") from failed
        except (OSError, ValueError) as exc:
            raise BadInputError(f"--update-readme: {exc}") from exc
    _print_summary(run, what_changed(out, before, folder_state(out)), console)
    failed_ids = [row["model_id"] for row in rows if row["status"] == AUDIT_ERROR]
    kept = [row["model_id"] for row in rows if failed_in_this_run(row) and row["status"] != AUDIT_ERROR]
    for ids, what in ((failed_ids, f"rows failed ({AUDIT_ERROR}"), (kept, f"rows failed ({KEPT.rstrip(': ')}")):
        if ids:
            err.print(
                f"{len(ids)} {what}: {', '.join(ids[:3])}{', …' if len(ids) > 3 else ''}); "
                "see their reason column, run again to retry them",
                highlight=False,
                soft_wrap=True,
            )
    if failed_ids or kept:
        raise typer.Exit(EXIT_ROWS_FAILED)
    raise typer.Exit(EXIT_OK)


def _corpus(
    corpus: Path, options: MatrixOptions, default_count: bool, cache_dir: Path | None, console: Console
) -> None:
    """The corpus matrix in ``OUT/corpus/`` (its own count unless ``--count`` is given, examples and way-out budget);
    always ends in ``typer.Exit``."""
    from dataclasses import replace

    from tito_audit.cli.matrix_corpus import (
        CORPUS_COUNT,
        CORPUS_EXAMPLES_PER_GROUP,
        CORPUS_WAY_OUT_BUDGET,
        corpus_command,
    )
    from tito_audit.model.resolve import default_cache_dir

    options = replace(
        options,
        out_dir=options.out_dir / "corpus",  # never over the curated matrix's own files
        examples_per_group=CORPUS_EXAMPLES_PER_GROUP,
        way_out_budget=CORPUS_WAY_OUT_BUDGET,
    )
    if default_count:
        options = replace(options, count=CORPUS_COUNT)
    corpus_command(corpus, options, cache_dir or default_cache_dir(), console)


def _run_with_progress(models: list[str], options: MatrixOptions, console: Console) -> MatrixRun:
    """The matrix rows, with an overall bar and one bar per model being audited (on a terminal); off a terminal, a
    line on stderr per model as it is done, with its time."""
    from tito_audit.matrix.run import run_matrix

    if not console.is_terminal:
        return run_matrix(models, options, ProgressLines(len(set(models))))
    return _run_with_bars(models, options, console)


def _run_with_bars(models: list[str], options: MatrixOptions, console: Console) -> MatrixRun:
    from tito_audit.matrix.run import run_matrix

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        overall = progress.add_task(f"[bold]{len(models)} models", total=len(set(models)))
        tasks: dict[str, Any] = {}

        def on_event(event: tuple[str, str, int, int]) -> None:
            model_id, stage, done, total = event
            if stage == "done":
                progress.advance(overall)
                if model_id in tasks:
                    progress.remove_task(tasks.pop(model_id))
                return
            if model_id not in tasks:
                tasks[model_id] = progress.add_task(model_id, total=total)
            progress.update(tasks[model_id], description=f"{model_id} [dim]{stage}[/dim]", completed=done, total=total)

        return run_matrix(models, options, on_event)


def _print_summary(run: MatrixRun, changed: str, console: Console) -> None:
    from tito_audit.formatters.results_table import print_results

    print_results(run.rows, console)
    audited = sum(1 for row in run.rows if row["status"] == "audited")
    store = run.store
    console.print(
        f"{audited} of {run.model_ids} models audited: {run.pairs} distinct template/tokenizer pairs, "
        f"{run.audited} audited in this run, {run.pairs - run.audited} from stored results"
        + (f" ({store.corrupt} corrupt entries recomputed)" if store.corrupt else "")
    )
    console.print(changed, highlight=False, soft_wrap=True)
    for note in dict.fromkeys(run.notes[:NOTES_SHOWN]):
        err.print(f"note: {note}", highlight=False, soft_wrap=True)
    if len(run.notes) > NOTES_SHOWN:
        err.print(f"note: … and {len(run.notes) - NOTES_SHOWN} more results-store notes", highlight=False)
