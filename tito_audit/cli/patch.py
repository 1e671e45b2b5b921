"""``tito-audit patch MODEL -o FILE``: a verified fix of the model's own template (or the setting that makes one
unnecessary), audited before it is written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tito_audit.cli.app import app
from tito_audit.cli.options import GroupDefaults, ModelArg, ModelSource, Sampling, with_option_groups
from tito_audit.cli.outcomes import finish
from tito_audit.errors import BadInputError
from tito_audit.outputs import write_outputs

OutputOpt = Annotated[Path, typer.Option("-o", "--output", metavar="FILE", help="Write the patched template here.")]
DiffOpt = Annotated[
    Path | None, typer.Option("--diff", metavar="FILE", help="Write the unified diff here (default: OUTPUT.diff).")
]
TrainingOpt = Annotated[
    Path | None,
    typer.Option(
        "--training",
        metavar="FILE",
        help="Write the training form (generation blocks around what the model samples, for assistant-only loss) "
        "here (default: OUTPUT with .training before its suffix).",
    ),
]
QuickSampling = Annotated[Sampling, GroupDefaults(count=48)]


@app.command("patch")
@with_option_groups
def patch_command(
    model: ModelArg,
    output: OutputOpt,
    source: ModelSource,
    sampling: QuickSampling,
    diff_path: DiffOpt = None,
    training_path: TrainingOpt = None,
) -> None:
    """Propose a prefix-stable template (a small, verified edit of the model's own) or the setting that makes
    one unnecessary."""
    from tito_audit.cli.wiring import audit_options, audit_with_progress, load
    from tito_audit.formatters.patch import render_fix, render_no_fix, render_setting, render_training
    from tito_audit.repair.way_out import FIX, SETTING, find_way_out

    loaded = load(model, source)
    if loaded.template_source is None:
        raise BadInputError(
            f"{loaded.resolved.model_id} renders through {loaded.backend}: there is no template to patch"
        )
    training_file = training_path or output.with_name(f"{output.stem}.training{output.suffix or '.jinja'}")
    diff_file = diff_path or output.with_name(output.name + ".diff")
    if training_file.resolve() in (output.resolve(), diff_file.resolve()):
        raise BadInputError(f"--training {training_file}: the same file as -o or --diff (the serving form)")
    console = Console()
    options = audit_options(sampling)

    def run_audit(model_to_audit, audit_settings):
        return audit_with_progress(model_to_audit, audit_settings, console, True)

    before = run_audit(loaded, options)
    way = find_way_out(loaded, before, options, run_audit)
    training = way.training
    trained: list[tuple[str, Path, str | bytes]] = []
    if training is not None and training.offered and training.source is not None:
        trained.append(("--training", training_file, training.source))
    if way.kind == SETTING and way.recommendation is not None and way.fix is None:
        render_setting(way, console)
        write_outputs(trained)  # the model's own template serves; only its training form is written
        render_training(training, [p for _, p, _ in trained], console)
        raise finish(True)
    if way.kind != FIX or way.fix is None or way.fix.patched_source is None:
        render_no_fix(way, console)
        raise finish(False)
    # both files or neither: a template without its diff (or a diff of a template not written) misleads
    write_outputs([("-o", output, way.fix.patched_source), ("--diff", diff_file, way.fix.diff(output.name)), *trained])
    render_fix(way.fix, [output, diff_file], console)
    render_training(training, [p for _, p, _ in trained], console)
    raise finish(True)
