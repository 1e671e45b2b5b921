"""What the commands share between parsing and output: loading a model, building the audit settings,
loading real conversations, running the audit with a progress bar."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tito_audit.cli.options import ConversationInputs, ModelSource, Sampling, TemplateSettings
from tito_audit.cli.outcomes import err
from tito_audit.datasources import load_conversations
from tito_audit.errors import AuditError, BadInputError
from tito_audit.loading import load_by_id
from tito_audit.model import LoadedModel, codec_for
from tito_audit.results import AuditReport
from tito_audit.scenarios import scenario_conversations
from tito_audit.service import DEFAULT_COUNT, AuditOptions, audit, refused_everything


def load(model: str, source: ModelSource) -> LoadedModel:
    """Resolve and load ``model`` the way every command does (registry special tokens included)."""
    return load_by_id(
        model,
        mirrors=source.mirror,
        cache_dir=source.cache_dir,
        revision=source.revision,
        allow_hub=not source.no_hub,
        trust_remote_code=source.trust_remote_code,
        template_file=source.template,
        template_name=source.template_name,
    )


def audit_options(
    sampling: Sampling,
    settings: TemplateSettings | None = None,
    *,
    defaults: dict[str, Any] | None = None,
    **extra: Any,
) -> AuditOptions:
    """The audit's settings from the command line; ``defaults`` (a policy table) fills what it left unset."""
    defaults = defaults or {}
    settings = settings or TemplateSettings()
    return AuditOptions(
        seed=sampling.seed if sampling.seed is not None else int(defaults.get("seed", 0)),
        count=sampling.count if sampling.count is not None else int(defaults.get("count", DEFAULT_COUNT)),
        max_turns=sampling.max_turns,
        pinned_kwargs=settings.pinned_kwargs(before=list(defaults.get("kwargs", []))),
        clock=settings.parsed_clock(),
        extra_stop_tokens=list(settings.stop_token),
        limits=settings.limits(),
        **extra,
    )


def add_conversation_inputs(options: AuditOptions, inputs: ConversationInputs) -> None:
    """Load real trajectories and scenario packs into ``options`` (generated ones stay only if asked)."""
    if not inputs.conversations and not inputs.scenario:
        return
    conversations: list = []
    labels = [f"generated ({options.count})"] if inputs.with_generated else []
    for source in inputs.conversations:
        dataset = load_conversations(source, split=inputs.split, limit=inputs.limit, tools_file=inputs.tools)
        options.datasets.append(dataset.summary())
        conversations += dataset.conversations
        skipped = sum(dataset.skipped.values())
        labels.append(
            f"{dataset.name} ({len(dataset.conversations)} of {dataset.records} records"
            + (f", {skipped} skipped" if skipped else "")
            + ")"
        )
    if inputs.scenario:
        packed = list(scenario_conversations(inputs.scenario, options.count, options.seed, max(options.max_turns, 4)))
        conversations += packed
        labels.append("scenarios " + ", ".join(inputs.scenario) + f" ({len(packed)})")
    if not conversations:
        raise BadInputError("no conversation could be loaded from --conversations (see the skipped reasons)")
    options.conversations = conversations
    options.with_generated = inputs.with_generated
    options.conversations_source = "; ".join(labels)


def audit_with_progress(loaded: LoadedModel, options: AuditOptions, console: Console, show: bool) -> AuditReport:
    """Run the audit with a progress bar per variant (on a terminal); warnings go to stderr."""
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


def attach_explanations(report: AuditReport, loaded: LoadedModel) -> None:
    """Template lines and cause confirmations for the first failure of each cause (JSON and terminal)."""
    from tito_audit.explain import compact, explain_first_per_cause

    if loaded.template_source is None:
        return
    for explanation in explain_first_per_cause(report, loaded, codec_for(loaded)):
        document = asdict(explanation)
        document["summary"] = compact(explanation)
        report.explanations.append(document)


def fail_if_refused_everything(report: AuditReport) -> None:
    reason = refused_everything(report)
    if reason is not None:
        raise AuditError(f"the template refused every conversation ({reason}); nothing could be audited")
