"""Command line: wires resolution, the audit service and the formatters, and maps outcomes to exit codes.

Exit codes: 0 the audit ran and the verdict is ``ready`` or ``ready-tool-only`` (``check``: every
requirement holds; ``matrix``: the matrix was written); 1 the audit ran and the verdict is worse
(``check``: a requirement failed); 2 the command could not run (bad input, model not found, template
missing).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" banner: we never load weights
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tito_audit import __version__
from tito_audit.datasources import load_conversations
from tito_audit.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_VERDICT, AuditError, BadInputError
from tito_audit.formatters.json_report import write_json
from tito_audit.formatters.markdown import write_markdown
from tito_audit.formatters.terminal import render_report, verdict_text
from tito_audit.generate import DEFAULT_MAX_TURNS, generate
from tito_audit.model import LoadedModel, load_model
from tito_audit.registry import family_of
from tito_audit.render import DEFAULT_CLOCK, RenderLimits
from tito_audit.resolve import resolve_model
from tito_audit.results import READY, READY_TOOL_ONLY, AuditReport
from tito_audit.scenarios import scenario_conversations, scenario_names
from tito_audit.service import DEFAULT_COUNT, AuditOptions, audit, refused_everything
from tito_audit.variants import parse_kwarg

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Audit chat templates and tokenizers for token-in/token-out (TITO) safety in multi-turn tool-calling RL.",
)
err = Console(stderr=True)

# -- options shared by the commands ------------------------------------------------------------------
ModelArg = Annotated[str, typer.Argument(help="Hub model id (org/name) or a local folder with tokenizer files.")]
TemplateOpt = Annotated[
    Path | None, typer.Option("--template", help="Audit this Jinja template file instead of the model's.")
]
TemplateNameOpt = Annotated[
    str | None, typer.Option("--template-name", help="Pick a named template of the tokenizer (e.g. tool_use).")
]
KwargOpt = Annotated[
    list[str],
    typer.Option("--kwarg", help="Pin a template keyword argument, name=value (JSON value or string). Repeatable."),
]
SeedOpt = Annotated[
    int, typer.Option("--seed", help="Seed of the conversation generator and of non-canonical sampling.")
]
CountOpt = Annotated[int, typer.Option("-n", "--count", min=1, help="Number of generated conversations.")]
MaxTurnsOpt = Annotated[int, typer.Option("--max-turns", min=2, help="Maximum assistant turns per conversation.")]
MirrorOpt = Annotated[
    list[Path],
    typer.Option("--mirror", help="Folder of <org>--<name>/ model folders. Repeatable; also TITO_AUDIT_MIRROR."),
]
CacheOpt = Annotated[
    Path | None,
    typer.Option("--cache-dir", help="Cache of downloaded files (default templates_cache/; also TITO_AUDIT_CACHE)."),
]
RevisionOpt = Annotated[str | None, typer.Option("--revision", help="Hub revision (branch, tag or commit).")]
NoHubOpt = Annotated[bool, typer.Option("--no-hub", help="Never contact the Hugging Face Hub.")]
RemoteCodeOpt = Annotated[
    bool, typer.Option("--trust-remote-code", help="Allow the model's own tokenizer code to run.")
]
StopTokenOpt = Annotated[list[str], typer.Option("--stop-token", help="An extra stop token (its text). Repeatable.")]
MaxCharsOpt = Annotated[
    int, typer.Option("--max-render-chars", min=1000, help="Refuse renders longer than this (characters).")
]
MaxSecondsOpt = Annotated[
    float, typer.Option("--max-render-seconds", min=0.0, help="Refuse renders slower than this (0: no limit).")
]
ConversationsOpt = Annotated[
    list[str],
    typer.Option("--conversations", help="Real trajectories: a JSON/JSONL/Parquet/.traj file or a hub data set id."),
]
SplitOpt = Annotated[str, typer.Option("--split", help="Split of a hub data set.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, help="Read at most N records per source.")]
ToolsOpt = Annotated[
    Path | None, typer.Option("--tools", help="A JSON list of tool schemas for records that carry none.")
]
ScenarioOpt = Annotated[
    list[str],
    typer.Option("--scenario", help="An RL-environment scenario pack (repeatable): " + ", ".join(scenario_names())),
]
WithGeneratedOpt = Annotated[
    bool,
    typer.Option("--with-generated", help="With --conversations/--scenario: audit the generated conversations too."),
]
ClockOpt = Annotated[
    str | None,
    typer.Option("--clock", help="Date templates see through strftime_now (ISO; default 2026-01-15T09:30)."),
]


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


def _parse_clock(text: str | None) -> datetime:
    if text is None:
        return DEFAULT_CLOCK
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadInputError(f"--clock expects an ISO date like 2026-01-15 or 2026-01-15T09:30, got '{text}'") from exc


def _parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    pinned: dict[str, Any] = {}
    for pair in pairs:
        try:
            name, value = parse_kwarg(pair)
        except ValueError as exc:
            raise BadInputError(str(exc)) from exc
        pinned[name] = value
    return pinned


def exit_code_for(report: AuditReport) -> int:
    return EXIT_OK if report.verdict in (READY, READY_TOOL_ONLY) else EXIT_VERDICT


def _load(
    model: str,
    *,
    template: Path | None,
    template_name: str | None,
    mirror: list[Path],
    cache_dir: Path | None,
    revision: str | None,
    no_hub: bool,
    trust_remote_code: bool,
) -> LoadedModel:
    """Resolve and load ``model`` the way every command does (registry special tokens included)."""
    if template is not None and not template.is_file():
        raise BadInputError(f"--template {template}: no such file")
    resolved = resolve_model(
        model,
        mirrors=mirror,
        cache_dir=cache_dir,
        revision=revision,
        allow_hub=not no_hub,
        trust_remote_code=trust_remote_code,
    )
    family = family_of(resolved.model_id)
    return load_model(
        resolved,
        template_file=template,
        template_name=template_name,
        trust_remote_code=trust_remote_code,
        special_token_defaults=family.special_tokens if family else None,
    )


def _apply_conversation_sources(
    options: AuditOptions,
    sources: list[str],
    scenarios: list[str],
    *,
    split: str,
    limit: int | None,
    tools: Path | None,
    with_generated: bool,
) -> None:
    """Load real trajectories and scenario packs into ``options`` (generated ones stay only if asked)."""
    if not sources and not scenarios:
        return
    conversations: list = []
    labels = [f"generated ({options.count})"] if with_generated else []
    for source in sources:
        dataset = load_conversations(source, split=split, limit=limit, tools_file=tools)
        options.datasets.append(dataset.summary())
        conversations += dataset.conversations
        skipped = sum(dataset.skipped.values())
        labels.append(
            f"{dataset.name} ({len(dataset.conversations)} of {dataset.records} records"
            + (f", {skipped} skipped" if skipped else "")
            + ")"
        )
    if scenarios:
        packed = list(scenario_conversations(scenarios, options.count, options.seed, max(options.max_turns, 4)))
        conversations += packed
        labels.append("scenarios " + ", ".join(scenarios) + f" ({len(packed)})")
    if not conversations:
        raise BadInputError("no conversation could be loaded from --conversations (see the skipped reasons)")
    options.conversations = conversations
    options.with_generated = with_generated
    options.conversations_source = "; ".join(labels)


def _attach_explanations(report: AuditReport, loaded: LoadedModel) -> None:
    """Template lines and cause confirmations for the first failure of each cause (JSON and terminal)."""
    from dataclasses import asdict

    from tito_audit.explain import compact, explain_first_per_cause
    from tito_audit.tokens import TokenCodec

    if loaded.template_source is None:
        return
    codec = TokenCodec(loaded.tokenizer, template_source=loaded.template_source)
    for explanation in explain_first_per_cause(report, loaded, codec):
        document = asdict(explanation)
        document["summary"] = compact(explanation)
        report.explanations.append(document)


def _fail_if_refused_everything(report: AuditReport) -> None:
    reason = refused_everything(report)
    if reason is not None:
        raise AuditError(f"the template refused every conversation ({reason}); nothing could be audited")


def _audit_with_progress(loaded: LoadedModel, options: AuditOptions, console: Console, show: bool) -> AuditReport:
    """Run the audit with a progress bar per variant (on a terminal)."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not (show and console.is_terminal),
    ) as progress:
        tasks: dict[str, Any] = {}

        def on_progress(variant: str, done: int, total: int) -> None:
            if variant not in tasks:
                tasks[variant] = progress.add_task(f"variant {variant}", total=total)
            progress.update(tasks[variant], completed=done)

        report = audit(loaded, options, on_progress)
    for note in report.notes:
        if note.startswith("warning:"):
            err.print(note, highlight=False)
    return report


@app.command("audit")
def audit_command(
    model: ModelArg,
    template: TemplateOpt = None,
    template_name: TemplateNameOpt = None,
    kwarg: KwargOpt = [],  # noqa: B006
    seed: SeedOpt = 0,
    count: CountOpt = DEFAULT_COUNT,
    max_turns: MaxTurnsOpt = DEFAULT_MAX_TURNS,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")] = None,
    markdown_path: Annotated[Path | None, typer.Option("--markdown", help="Write the Markdown report here.")] = None,
    mirror: MirrorOpt = [],  # noqa: B006
    cache_dir: CacheOpt = None,
    revision: RevisionOpt = None,
    no_hub: NoHubOpt = False,
    trust_remote_code: RemoteCodeOpt = False,
    stop_token: StopTokenOpt = [],  # noqa: B006
    clock: ClockOpt = None,
    examples: Annotated[
        int | None,
        typer.Option(
            "--examples", min=1, help="Keep only N failures per (check, category, causes) group (default: all)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the verdict line.")] = False,
    max_render_chars: MaxCharsOpt = RenderLimits.max_chars,
    max_render_seconds: MaxSecondsOpt = RenderLimits.max_seconds,
    conversations: ConversationsOpt = [],  # noqa: B006
    split: SplitOpt = "train",
    limit: LimitOpt = None,
    tools: ToolsOpt = None,
    scenario: ScenarioOpt = [],  # noqa: B006
    with_generated: WithGeneratedOpt = False,
) -> None:
    """Audit one model: simulated TITO rollouts, the four checks, a verdict per template variant."""
    console = Console()
    options = AuditOptions(
        seed=seed,
        count=count,
        max_turns=max_turns,
        pinned_kwargs=_parse_kwargs(kwarg),
        clock=_parse_clock(clock),
        extra_stop_tokens=list(stop_token),
        max_examples_per_group=examples,
        limits=RenderLimits(max_render_chars, max_render_seconds),
    )
    _apply_conversation_sources(
        options, conversations, scenario, split=split, limit=limit, tools=tools, with_generated=with_generated
    )
    loaded = _load(
        model,
        template=template,
        template_name=template_name,
        mirror=mirror,
        cache_dir=cache_dir,
        revision=revision,
        no_hub=no_hub,
        trust_remote_code=trust_remote_code,
    )
    report = _audit_with_progress(loaded, options, console, show=not quiet)
    _attach_explanations(report, loaded)
    if json_path is not None:
        write_json(report, json_path)
    if markdown_path is not None:
        write_markdown(report, markdown_path)
    _fail_if_refused_everything(report)
    if quiet:
        console.print(verdict_text(report.verdict), f"{report.model.model_id}")
    else:
        render_report(report, console)
    raise typer.Exit(exit_code_for(report))


@app.command("check")
def check_command(
    model: ModelArg,
    require: Annotated[
        list[str],
        typer.Option(
            "--require", help="A required property (see README, 'CI gate'). Repeatable; default rollout:tool."
        ),
    ] = [],  # noqa: B006
    allow_cause: Annotated[
        list[str], typer.Option("--allow-cause", help="A cause label whose failures do not count. Repeatable.")
    ] = [],  # noqa: B006
    baseline: Annotated[
        Path | None, typer.Option("--baseline", help="A JSON report to compare with: only new failures count.")
    ] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here.")] = None,
    github: Annotated[bool, typer.Option("--github", help="Print GitHub Actions ::error annotations.")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the check result as JSON here.")] = None,
    report_path: Annotated[
        Path | None, typer.Option("--report", help="Also write the full audit report (JSON) here, e.g. a new baseline.")
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", help="pyproject.toml whose [tool.tito-audit] holds a policy.")
    ] = Path("pyproject.toml"),
    template: TemplateOpt = None,
    template_name: TemplateNameOpt = None,
    kwarg: KwargOpt = [],  # noqa: B006
    seed: Annotated[int | None, typer.Option("--seed", help="Seed (default 0, or the policy's).")] = None,
    count: Annotated[int | None, typer.Option("-n", "--count", min=1, help="Conversations (default 96).")] = None,
    max_turns: MaxTurnsOpt = DEFAULT_MAX_TURNS,
    mirror: MirrorOpt = [],  # noqa: B006
    cache_dir: CacheOpt = None,
    revision: RevisionOpt = None,
    no_hub: NoHubOpt = False,
    trust_remote_code: RemoteCodeOpt = False,
    stop_token: StopTokenOpt = [],  # noqa: B006
    clock: ClockOpt = None,
    max_render_chars: MaxCharsOpt = RenderLimits.max_chars,
    max_render_seconds: MaxSecondsOpt = RenderLimits.max_seconds,
    conversations: ConversationsOpt = [],  # noqa: B006
    split: SplitOpt = "train",
    limit: LimitOpt = None,
    tools: ToolsOpt = None,
    scenario: ScenarioOpt = [],  # noqa: B006
    with_generated: WithGeneratedOpt = False,
) -> None:
    """Gate a model or template in CI: audit it and check the required properties (exit 0 pass, 1 fail)."""
    from tito_audit.formatters import ci
    from tito_audit.policy import (
        DEFAULT_REQUIREMENTS,
        Policy,
        check_causes,
        evaluate,
        load_baseline,
        parse_requirement,
        read_pyproject_policy,
    )

    started = time.monotonic()
    table = read_pyproject_policy(config)
    requirements = [parse_requirement(r) for r in (require or table.get("require") or DEFAULT_REQUIREMENTS)]
    allowed = check_causes([*allow_cause, *table.get("allow-causes", [])])
    baseline_path = baseline or (Path(table["baseline"]) if table.get("baseline") else None)
    policy = Policy(
        requirements=requirements,
        allowed_causes=allowed,
        baseline=load_baseline(baseline_path) if baseline_path else None,
        baseline_path=str(baseline_path) if baseline_path else None,
    )
    if template is None and table.get("template"):
        template = Path(table["template"])
    options = AuditOptions(
        seed=seed if seed is not None else int(table.get("seed", 0)),
        count=count if count is not None else int(table.get("count", DEFAULT_COUNT)),
        max_turns=max_turns,
        pinned_kwargs=_parse_kwargs([*table.get("kwargs", []), *kwarg]),
        clock=_parse_clock(clock),
        extra_stop_tokens=list(stop_token),
        limits=RenderLimits(max_render_chars, max_render_seconds),
    )
    _apply_conversation_sources(
        options, conversations, scenario, split=split, limit=limit, tools=tools, with_generated=with_generated
    )
    loaded = _load(
        model,
        template=template,
        template_name=template_name,
        mirror=mirror,
        cache_dir=cache_dir,
        revision=revision,
        no_hub=no_hub,
        trust_remote_code=trust_remote_code,
    )
    console = Console()
    report = _audit_with_progress(loaded, options, console, show=True)
    if report_path is not None:
        write_json(report, report_path)
    _fail_if_refused_everything(report)
    results = evaluate(report, policy)
    model_id = report.model.model_id
    for result in results:
        mark = "[bold green]PASS[/bold green]" if result.passed else "[bold red]FAIL[/bold red]"
        console.print(f"{mark} {result.requirement}: {result.reason}", highlight=False, soft_wrap=True)
    duration = time.monotonic() - started
    if junit is not None:
        ci.write(junit, ci.to_junit(model_id, results, duration))
    if json_path is not None:
        ci.write(json_path, ci.to_json(model_id, results, report.verdict, policy.baseline_path))
    if github:
        sys.stdout.write(ci.to_github_annotations(model_id, results, str(template) if template else None))
    raise typer.Exit(EXIT_OK if all(r.passed for r in results) else EXIT_VERDICT)


def _read_models_file(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"--models-file {path}: {exc}") from exc
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


@app.command("matrix")
def matrix_command(
    models: Annotated[
        list[str] | None, typer.Argument(help="Model ids or folders (default: every model of the family registry).")
    ] = None,
    models_file: Annotated[
        Path | None, typer.Option("--models-file", help="A file with one model id per line (# comments).")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("reports"),
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=1, help="Worker processes (default: the number of cores).")
    ] = os.cpu_count() or 1,
    mirror: MirrorOpt = [],  # noqa: B006
    cache_dir: CacheOpt = None,
    no_hub: NoHubOpt = False,
    seed: SeedOpt = 0,
    count: CountOpt = DEFAULT_COUNT,
    max_turns: MaxTurnsOpt = DEFAULT_MAX_TURNS,
    conversations: Annotated[
        list[str],
        typer.Option("--conversations", help="Real trajectories for the combined-audit column (repeatable)."),
    ] = [],  # noqa: B006
    limit: LimitOpt = None,
    readme: Annotated[
        Path | None, typer.Option("--update-readme", help="Rewrite the matrix block of this README.")
    ] = None,
) -> None:
    """Audit many models in parallel and write the compatibility matrix (md, csv, json, parquet, html)."""
    from tito_audit.formatters.matrix import update_readme, write_matrix
    from tito_audit.matrix import MatrixOptions, run_matrix
    from tito_audit.registry import registry_model_ids

    console = Console()
    chosen = list(models or [])
    if models_file is not None:
        chosen += _read_models_file(models_file)
    if not chosen:
        chosen = registry_model_ids()
    options = MatrixOptions(
        out_dir=out,
        mirrors=list(mirror),
        cache_dir=cache_dir,
        allow_hub=not no_hub,
        seed=seed,
        count=count,
        max_turns=max_turns,
        jobs=jobs,
        conversation_sources=list(conversations),
        conversations_limit=limit,
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as progress:
        overall = progress.add_task(f"[bold]{len(chosen)} models", total=len(set(chosen)))
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

        rows = run_matrix(chosen, options, on_event)
    settings = {
        "models": "registry" if not (models or models_file) else sorted(set(chosen)),
        "mirrors": [str(m) for m in mirror],
        "hub": not no_hub,
        "seed": seed,
        "count": count,
        "max_turns": max_turns,
        "conversations": list(conversations),
        "conversations_limit": limit,
    }
    written = write_matrix(rows, out, settings)
    if readme is not None:
        try:
            update_readme(readme, rows)
        except (OSError, ValueError) as exc:
            raise BadInputError(f"--update-readme: {exc}") from exc
    audited = sum(1 for row in rows if row["status"] == "audited")
    table = Table(header_style="bold")
    for column in ("model", "verdict", "level", "main causes"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            row["model_id"], verdict_text(row["verdict"] or row["status"]), row["audit_level"], row["main_causes"]
        )
    console.print(table)
    console.print(f"{audited} of {len(rows)} models audited; wrote " + ", ".join(str(p) for p in written))
    raise typer.Exit(EXIT_OK)


@app.command("replay")
def replay_command(
    rollouts: Annotated[Path, typer.Argument(help="A JSONL file of saved rollouts (see README, 'Replay').")],
    model: Annotated[str, typer.Option("--model", help="The model whose tokenizer and template produced them.")],
    template: TemplateOpt = None,
    template_name: TemplateNameOpt = None,
    kwarg: KwargOpt = [],  # noqa: B006
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the replay report as JSON.")] = None,
    markdown_path: Annotated[
        Path | None, typer.Option("--markdown", help="Write the replay report as Markdown.")
    ] = None,
    mirror: MirrorOpt = [],  # noqa: B006
    cache_dir: CacheOpt = None,
    revision: RevisionOpt = None,
    no_hub: NoHubOpt = False,
    trust_remote_code: RemoteCodeOpt = False,
) -> None:
    """Verify saved rollouts token by token: were the trained tokens the sampled ones? (exit 1 if not)"""
    from tito_audit.formatters import replay as replay_format
    from tito_audit.render import Renderer, frozen_clock
    from tito_audit.replay import read_records, replay
    from tito_audit.tokens import TokenCodec

    records = read_records(rollouts)
    loaded = _load(
        model,
        template=template,
        template_name=template_name,
        mirror=mirror,
        cache_dir=cache_dir,
        revision=revision,
        no_hub=no_hub,
        trust_remote_code=trust_remote_code,
    )
    codec = TokenCodec(
        loaded.tokenizer, piecewise_control_tokens=loaded.backend != "jinja", template_source=loaded.template_source
    )
    renderer = Renderer(loaded, codec, _parse_kwargs(kwarg))
    with frozen_clock(loaded.template_source, DEFAULT_CLOCK):
        report = replay(records, renderer, codec, loaded.resolved.model_id, rollouts.name)
    if json_path is not None:
        replay_format.write(json_path, replay_format.to_json(report))
    if markdown_path is not None:
        replay_format.write(markdown_path, replay_format.to_markdown(report))
    if not report.results:
        raise BadInputError(f"{rollouts}: no record could be replayed (" + "; ".join(report.skipped) + ")")
    replay_format.render_replay(report, Console())
    raise typer.Exit(EXIT_OK if report.consistent else EXIT_VERDICT)


@app.command("explain")
def explain_command(
    model: ModelArg,
    case: Annotated[
        int | None, typer.Option("--case", min=1, help="Explain one failing case in full (its number).")
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the explanations as JSON.")] = None,
    template: TemplateOpt = None,
    template_name: TemplateNameOpt = None,
    kwarg: KwargOpt = [],  # noqa: B006
    seed: SeedOpt = 0,
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="Number of generated conversations.")] = 48,
    max_turns: MaxTurnsOpt = DEFAULT_MAX_TURNS,
    mirror: MirrorOpt = [],  # noqa: B006
    cache_dir: CacheOpt = None,
    revision: RevisionOpt = None,
    no_hub: NoHubOpt = False,
    trust_remote_code: RemoteCodeOpt = False,
) -> None:
    """Every distinct cause with its evidence and the template lines that produce it (or one case in full)."""
    import json as json_module
    from dataclasses import asdict

    from tito_audit.explain import Explainer, numbered_failures
    from tito_audit.formatters.explain import render_explanations
    from tito_audit.tokens import TokenCodec

    loaded = _load(
        model,
        template=template,
        template_name=template_name,
        mirror=mirror,
        cache_dir=cache_dir,
        revision=revision,
        no_hub=no_hub,
        trust_remote_code=trust_remote_code,
    )
    console = Console()
    options = AuditOptions(seed=seed, count=count, max_turns=max_turns, pinned_kwargs=_parse_kwargs(kwarg))
    report = _audit_with_progress(loaded, options, console, show=True)
    cases = numbered_failures(report)
    if case is not None and not 1 <= case <= len(cases):
        raise BadInputError(f"--case {case}: there are {len(cases)} failing cases")
    codec = TokenCodec(
        loaded.tokenizer, piecewise_control_tokens=loaded.backend != "jinja", template_source=loaded.template_source
    )
    explainer = Explainer(loaded, codec, report)
    if case is not None:
        chosen = [cases[case - 1]]
    else:
        seen: set[str] = set()
        chosen = []
        for number, variant, failure in cases:
            new = [c for c in failure.causes if c not in seen]
            if new:
                seen.update(failure.causes)
                chosen.append((number, variant, failure))
    explanations = [explainer.explain(n, v, f) for n, v, f in chosen]
    causes: dict[str, list[int]] = {}
    for number, _, failure in cases:
        for cause in failure.causes:
            causes.setdefault(cause, []).append(number)
    if json_path is not None:
        document = {
            "model_id": report.model.model_id,
            "template_sha256": report.model.template_sha256,
            "verdict": report.verdict,
            "cases": len(cases),
            "causes": causes,
            "explanations": [asdict(e) for e in explanations],
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json_module.dumps(document, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    render_explanations(report, explanations, causes, len(cases), console, full=case is not None)
    raise typer.Exit(exit_code_for(report))


@app.command("patch")
def patch_command(
    model: ModelArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Write the patched template here.")],
    diff_path: Annotated[
        Path | None, typer.Option("--diff", help="Write the unified diff here (default: OUTPUT.diff).")
    ] = None,
    template: TemplateOpt = None,
    template_name: TemplateNameOpt = None,
    seed: SeedOpt = 0,
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="Number of generated conversations.")] = 48,
    max_turns: MaxTurnsOpt = DEFAULT_MAX_TURNS,
    mirror: MirrorOpt = [],  # noqa: B006
    cache_dir: CacheOpt = None,
    revision: RevisionOpt = None,
    no_hub: NoHubOpt = False,
    trust_remote_code: RemoteCodeOpt = False,
) -> None:
    """Propose a prefix-stable template for the causes with a mechanical fix, audited before it is written."""
    from dataclasses import replace

    from tito_audit.patching import propose_patch, prove_no_change
    from tito_audit.render import Renderer, frozen_clock
    from tito_audit.tokens import TokenCodec
    from tito_audit.variants import jinja_environment

    loaded = _load(
        model,
        template=template,
        template_name=template_name,
        mirror=mirror,
        cache_dir=cache_dir,
        revision=revision,
        no_hub=no_hub,
        trust_remote_code=trust_remote_code,
    )
    if loaded.template_source is None:
        raise BadInputError(
            f"{loaded.resolved.model_id} renders through {loaded.backend}: there is no template to patch"
        )
    console = Console()
    options = AuditOptions(seed=seed, count=count, max_turns=max_turns)
    before = _audit_with_progress(loaded, options, console, show=True)
    causes = sorted(
        {c for v in before.variants for c in v.checks["rollout"].cause_counts}
        | {f.cause for v in before.variants for f in v.findings}
    )
    patch = propose_patch(loaded.template_source, causes, jinja_environment(), options.clock)
    for cause, reason in patch.refused.items():
        console.print(f"[yellow]not fixed[/yellow] {cause}: {reason}", highlight=False)
    if not patch.changed:
        console.print(
            f"no known mechanical fix applies (verdict {before.verdict}; causes: {', '.join(causes) or 'none'})"
        )
        raise typer.Exit(EXIT_VERDICT)
    patched = replace(loaded, template_source=patch.patched, template_origin="patched", template_name=None)
    after = _audit_with_progress(patched, options, console, show=True)
    codec = TokenCodec(loaded.tokenizer, template_source=loaded.template_source)
    original_renderer, patched_renderer = Renderer(loaded, codec), Renderer(patched, codec)
    conversations = list(generate(count, seed, max_turns))
    with frozen_clock(loaded.template_source, options.clock), frozen_clock(patch.patched, options.clock):
        proof = prove_no_change(conversations, original_renderer.text, patched_renderer.text)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(patch.patched, encoding="utf-8")
    diff_file = diff_path or output.with_name(output.name + ".diff")
    diff_file.write_text(patch.unified_diff(output.name), encoding="utf-8")
    for edit in patch.edits:
        console.print(
            f"[cyan]{edit.fix}[/cyan] line {edit.line}: {edit.before.strip()}  →  {edit.after.strip()}", highlight=False
        )
    table = Table(header_style="bold")
    for column in ("variant", "before", "after", "why not ready after the patch"):
        table.add_column(column, overflow="fold")
    for old, new in zip(before.variants, after.variants, strict=False):
        why = "" if new.verdict == READY else new.verdict_reason
        table.add_row(old.name, verdict_text(old.verdict), verdict_text(new.verdict), why)
    console.print(table)
    status = "holds" if proof.holds else "FAILS"
    console.print(
        f"no-change proof {status}: {proof.identical} of {proof.compared} renders without an earlier assistant turn "
        f"are byte-identical; {proof.changed_elsewhere} renders with one changed (where the fix applies)",
        highlight=False,
    )
    for where in proof.differing:
        console.print(f"  differs: {where}", highlight=False)
    console.print(f"wrote {output} and {diff_file}")
    good = after.verdict in (READY, READY_TOOL_ONLY) and proof.holds
    raise typer.Exit(EXIT_OK if good else EXIT_VERDICT)


def main() -> None:
    """Entry point: expected errors become one line on stderr and exit code 2."""
    try:
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else EXIT_OK)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except AuditError as exc:
        err.print(f"[bold red]error:[/bold red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("error: aborted", highlight=False)
        sys.exit(EXIT_CANNOT_RUN)
    except Exception as exc:  # click usage errors and anything unexpected: one line, never a traceback
        usage = getattr(exc, "format_message", None)
        if usage is not None:
            err.print(f"error: {usage()}", highlight=False, soft_wrap=True)
            sys.exit(EXIT_CANNOT_RUN)
        if os.environ.get("TITO_AUDIT_DEBUG"):
            raise
        err.print(
            f"error: unexpected {type(exc).__name__}: {exc} (set TITO_AUDIT_DEBUG=1 for a traceback)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_CANNOT_RUN)


if __name__ == "__main__":
    main()
