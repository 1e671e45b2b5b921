"""``tito-audit replay ROLLOUTS --model MODEL``: verify saved rollouts token by token."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tito_audit.cli.app import app
from tito_audit.cli.options import (
    JsonOutOpt,
    KwargOpt,
    MarkdownOutOpt,
    ModelSource,
    parse_kwargs,
    with_option_groups,
)
from tito_audit.cli.outcomes import finish
from tito_audit.errors import BadInputError
from tito_audit.outputs import write_outputs

RolloutsArg = Annotated[
    Path, typer.Argument(metavar="ROLLOUTS", help="A JSONL file of saved rollouts (see docs/audit.md, 'Replay').")
]
ReplayModelOpt = Annotated[
    str, typer.Option("--model", metavar="MODEL", help="The model whose tokenizer and template produced them.")
]


@app.command("replay")
@with_option_groups
def replay_command(
    rollouts: RolloutsArg,
    model: ReplayModelOpt,
    source: ModelSource,
    kwarg: KwargOpt = [],  # noqa: B006
    json_path: JsonOutOpt = None,
    markdown_path: MarkdownOutOpt = None,
) -> None:
    """Verify saved rollouts token by token: were the trained tokens the sampled ones? (exit 1 if not)"""
    from tito_audit.cli.wiring import load
    from tito_audit.formatters import replay_report as replay_format
    from tito_audit.model.render import DEFAULT_CLOCK
    from tito_audit.session import TitoSession
    from tito_audit.session.rollout_replay import read_records, replay

    records = read_records(rollouts)
    loaded = load(model, source)
    guard = TitoSession.from_loaded(loaded, template_kwargs=parse_kwargs(kwarg), clock=DEFAULT_CLOCK)
    report = replay(records, guard, loaded.resolved.model_id, rollouts.name)
    outputs = []
    if json_path is not None:
        outputs.append(("--json", json_path, replay_format.to_json(report)))
    if markdown_path is not None:
        outputs.append(("--markdown", markdown_path, replay_format.to_markdown(report)))
    write_outputs(outputs)
    if not report.results:
        raise BadInputError(f"{rollouts}: no record could be replayed (" + "; ".join(report.skipped) + ")")
    replay_format.render_replay(report, Console())
    raise finish(report.consistent)
