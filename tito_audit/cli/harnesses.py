"""``tito-audit harnesses``: run real agent harnesses against the gateway in front of the stand-in engine and publish
the harness matrix (docs/harnesses.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tito_audit.cli.app import app
from tito_audit.errors import BadInputError

ModelsOpt = Annotated[
    list[str] | None, typer.Option("--model", metavar="MODEL", help="A model to run (repeat; default: the five).")
]
ParsersOpt = Annotated[
    list[str] | None,
    typer.Option("--parser", metavar="ENGINE", help="sglang or vllm: the engine whose documented parser (repeat)."),
]
HarnessOpt = Annotated[
    list[str] | None, typer.Option("--harness", metavar="NAME", help="A harness to run (repeat; default: all).")
]
RolloutsOpt = Annotated[int, typer.Option("--rollouts", min=1, max=20, help="Rollouts per row.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="The stand-in engine's seed.")]
StoreOpt = Annotated[
    Path, typer.Option("--store", metavar="DIR", help="Where each cell's record is kept by its inputs.")
]
InstalledOpt = Annotated[
    Path, typer.Option("--installed", metavar="DIR", help="Where make harnesses-install put the harnesses.")
]
MirrorOpt = Annotated[
    list[str] | None,
    typer.Option("--mirror", metavar="DIR", help="Folders of model files (default ../shared/tokenizers)."),
]
JobsOpt = Annotated[int, typer.Option("--jobs", min=1, max=8, help="Groups (model × parser) run at once.")]
OutOpt = Annotated[Path, typer.Option("--out", metavar="DIR", help="Where harnesses.json, .md and .html go.")]


@app.command("harnesses")
def harnesses_command(
    model: ModelsOpt = None,
    parser: ParsersOpt = None,
    harness: HarnessOpt = None,
    rollouts: RolloutsOpt = 2,
    seed: SeedOpt = 0,
    store: StoreOpt = Path("out/harnesses-store"),
    installed: InstalledOpt = Path(".venv/harnesses"),
    mirror: MirrorOpt = None,
    out: OutOpt = Path("reports"),
    jobs: JobsOpt = 2,
) -> None:
    """Run agent harnesses as they ship against the gateway and the stand-in engine; write the harness matrix."""
    from tito_audit.harnesses.catalogue import HARNESSES
    from tito_audit.harnesses.publish import publish
    from tito_audit.harnesses.rows import shown_share, trainable_share
    from tito_audit.harnesses.run import MODELS, PARSERS, TableOptions, run_table

    known = {h.name for h in HARNESSES}
    for name in harness or []:
        if name not in known:
            raise BadInputError(f"--harness {name}: no such harness (known: {', '.join(sorted(known))})")
    for name in parser or []:
        if name not in PARSERS:
            raise BadInputError(f"--parser {name}: one of {', '.join(PARSERS)}")
    if not installed.is_dir():
        raise BadInputError(
            f"--installed {installed}: not a folder; install the harnesses first (make harnesses-install)"
        )
    options = TableOptions(
        models=model or MODELS,
        parsers=parser or PARSERS,
        harnesses=harness or [h.name for h in HARNESSES],
        rollouts=rollouts,
        seed=seed,
        store=store,
        installed=installed,
        mirrors=mirror or ["../shared/tokenizers"],
        jobs=jobs,
    )
    err = Console(stderr=True, highlight=False)
    table = run_table(options, log=lambda line: err.print(f"harnesses: {line}"))
    written = publish(table, out)
    shown = Table("harness", "model", "parser", "configuration", "rollouts", "trainable", "seconds")
    for row in table["rows"]:
        share = "—" if row["share"] is None else shown_share({**row, "trainable": trainable_share(row)})
        ran = f"{row['finished']}/{row['rollouts']}"
        shown.add_row(
            row["harness"], row["model"], row["parser"], row["configuration"], ran, share, str(row["seconds"])
        )
    Console().print(shown)
    store_line = table["store"]
    err.print(
        f"harnesses: {len(table['rows'])} rows in {table['seconds']:.0f} s ({store_line['hits']} cells from the store, "
        f"{store_line['misses']} run); wrote {', '.join(str(p) for p in written) or 'nothing (unchanged)'}"
    )
