"""What the commands share between parsing and output: loading a model, building the audit settings,
loading real conversations, running the audit with a progress bar."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tito_audit.audit.audit_options import DEFAULT_COUNT, AuditOptions
from tito_audit.audit.results import AuditReport
from tito_audit.cli.options import ConversationInputs, ModelSource, Sampling, TemplateSettings
from tito_audit.cli.outcomes import err
from tito_audit.conversations.tools import ToolSet
from tito_audit.conversations.windows import window_note
from tito_audit.errors import AuditError, BadInputError

if TYPE_CHECKING:
    from tito_audit.conversations.datasources import DataSet
    from tito_audit.model.load_folder import LoadedModel

# The machinery (the audit, the model loader, the data sources) is imported where a command uses it, so that
# ``tito-audit --help`` and commands that need none of it start at once.

REASONS_SHOWN = 5
"""Skip reasons printed per source when no conversation could be loaded."""
LONG_CONVERSATION = 100
"""Messages beyond which a conversation counts as long (progress lines off a terminal)."""
PROGRESS_EVERY = 10.0
"""Seconds between two progress lines off a terminal."""


def load(model: str, source: ModelSource, parser: str | None = None) -> LoadedModel:
    """Resolve and load ``model`` the way every command does (registry special tokens included; an engine-rendered
    model connected to the encoder that renders it); ``parser``: the ``--parser`` of the audit to come, whose engines
    start what they need meanwhile (vLLM's worker imports vLLM on the other core while the tokenizer loads)."""
    from tito_audit.model.load_by_id import load_by_id
    from tito_audit.parse.vllm_encoder import connect

    if parser is not None:
        from tito_audit.parse.choice import start_ahead

        start_ahead(parser, model)

    return connect(
        load_by_id(
            model,
            mirrors=source.mirror,
            cache_dir=source.cache_dir,
            revision=source.revision,
            allow_hub=not source.no_hub,
            trust_remote_code=source.trust_remote_code,
            template_file=source.template,
            template_name=source.template_name,
        )
    )


def model_words(model: str, source: ModelSource, settings: TemplateSettings | None = None) -> list[str]:
    """The model as the user named it and the options that found it and shaped its audit, for the commands a
    report suggests (``tito-audit patch`` + these + ``-o FILE`` runs as printed): the model's source options, the
    template settings that differ from their defaults, and ``--parser`` when it is not ``auto``."""
    words = [model]
    words += [word for mirror in source.mirror for word in ("--mirror", str(mirror))]
    given = {
        "--template": source.template,
        "--template-name": source.template_name,
        "--cache-dir": source.cache_dir,
        "--revision": source.revision,
    }
    words += [word for option, value in given.items() if value is not None for word in (option, str(value))]
    words += ["--no-hub"] if source.no_hub else []
    words += ["--trust-remote-code"] if source.trust_remote_code else []
    if settings is not None:
        defaults = TemplateSettings()
        words += [word for pair in settings.kwarg for word in ("--kwarg", pair)]
        words += [word for token in settings.stop_token for word in ("--stop-token", token)]
        changed = {
            "--clock": (settings.clock, defaults.clock),
            "--max-render-chars": (settings.max_render_chars, defaults.max_render_chars),
            "--max-render-seconds": (settings.max_render_seconds, defaults.max_render_seconds),
            "--max-render-bytes": (settings.max_render_bytes, defaults.max_render_bytes),
            "--parser": (settings.parser, defaults.parser),
        }
        words += [
            word for option, (value, default) in changed.items() if value != default for word in (option, str(value))
        ]
    return words


def audit_options(
    sampling: Sampling,
    settings: TemplateSettings | None = None,
    *,
    defaults: dict[str, Any] | None = None,
    **extra: Any,
) -> AuditOptions:
    """The audit's settings from the command line; ``defaults`` (a policy table) fills what it left unset."""
    from tito_audit.parse.choice import check_parser_value

    defaults = defaults or {}
    settings = settings or TemplateSettings(parser="template")
    check_parser_value(settings.parser)
    return AuditOptions(
        seed=sampling.seed if sampling.seed is not None else int(defaults.get("seed", 0)),
        count=sampling.count if sampling.count is not None else int(defaults.get("count", DEFAULT_COUNT)),
        max_turns=sampling.max_turns,
        pinned_kwargs=settings.pinned_kwargs(before=list(defaults.get("kwargs", []))),
        clock=settings.parsed_clock(),
        extra_stop_tokens=list(settings.stop_token),
        limits=settings.limits(),
        parser=settings.parser,
        **extra,
    )


def add_conversation_inputs(options: AuditOptions, inputs: ConversationInputs) -> None:
    """Load real trajectories and scenario packs into ``options`` (generated ones stay only if asked)."""
    from tito_audit.conversations.datasources import load_conversations
    from tito_audit.conversations.scenarios import scenario_conversations

    options.max_messages = inputs.max_messages or None
    if inputs.tools is not None:
        options.tools = tools_from_file(inputs.tools)
    if not inputs.conversations and not inputs.scenario:
        return
    conversations: list = []
    labels = [f"generated ({options.count})"] if inputs.with_generated else []
    loaded = []
    for source in inputs.conversations:
        dataset = load_conversations(
            source, split=inputs.split, limit=inputs.limit, tools_file=inputs.tools, on_progress=_reading(source)
        )
        loaded.append(dataset)
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
        raise BadInputError("no conversation could be loaded from --conversations:\n" + skipped_reasons(loaded))
    cut = window_note(conversations, options.max_messages)
    if cut is not None:
        err.print(f"note: {cut}", highlight=False, soft_wrap=True)
    options.conversations = conversations
    options.with_generated = inputs.with_generated
    options.conversations_source = "; ".join(labels)


def tools_from_file(path: Path) -> ToolSet:
    """The tools of ``--tools`` (the OpenAI ``tools`` JSON a user gives their engine): generated conversations
    declare and call them instead of the built-in ones. A tool whose arguments cannot be drawn is refused in one
    line naming the tool and the keyword."""
    from tito_audit.conversations.datasources import read_tools
    from tito_audit.conversations.schema_check import check_tool_schemas
    from tito_audit.conversations.tools import user_tools

    tools = read_tools(path, "--tools") or []
    if not tools:
        raise BadInputError(f"--tools {path}: no tool in the file")
    check_tool_schemas(tools, f"--tools {path}")
    return user_tools(tools, str(path))


def _reading(source: str) -> Any:
    """A progress callback for reading ``source``: a line on stderr at most every :data:`PROGRESS_EVERY` seconds
    (nothing for a source read in less)."""
    started = last = time.monotonic()

    def on_progress(records: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY:
            last = now
            err.print(f"reading {source}: {records:,} records ({now - started:.0f}s)", highlight=False, soft_wrap=True)

    return on_progress


def skipped_reasons(datasets: list[DataSet], shown: int = REASONS_SHOWN) -> str:
    """Why each source gave no conversation: per source, its record count, then the most frequent skip reasons
    (count and reason, one line each; the others counted)."""
    lines = []
    for dataset in datasets:
        if not dataset.records:
            lines.append(f"  {dataset.name}: no records")
            continue
        skipped = sum(dataset.skipped.values())
        lines.append(f"  {dataset.name}: {dataset.records} records, {skipped} skipped:")
        ranked = sorted(dataset.skipped.items(), key=lambda kv: (-kv[1], kv[0]))
        lines += [f"    {count} × {reason}" for reason, count in ranked[:shown]]
        if len(ranked) > shown:
            lines.append(f"    … and {len(ranked) - shown} other reasons ({sum(c for _, c in ranked[shown:])} records)")
    return "\n".join(lines)


def audit_with_progress(loaded: LoadedModel, options: AuditOptions, console: Console, show: bool) -> AuditReport:
    """Run the audit with a progress bar per variant (on a terminal, from the start); warnings go to stderr.

    Long conversations take a while each (every prefix is rendered): when not on a terminal, their progress is a
    line on stderr every :data:`PROGRESS_EVERY` seconds."""
    from tito_audit.audit.service import audit

    longest = max((len(c.messages) for c in options.conversations or []), default=0)
    lines = show and not console.is_terminal and longest > LONG_CONVERSATION
    if lines:
        err.print(
            f"auditing {len(options.conversations or [])} conversations, the longest of {longest} messages "
            f"(progress every {PROGRESS_EVERY:g}s)",
            highlight=False,
        )
    said = [time.monotonic()]
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
        starting = progress.add_task("auditing", total=None)  # shown until the first conversation is done

        def on_progress(variant: str, done: int, total: int) -> None:
            if starting in progress.task_ids:
                progress.remove_task(starting)
            if variant not in tasks:
                tasks[variant] = progress.add_task(f"variant {variant}", total=total)
            progress.update(tasks[variant], completed=done)
            if lines and (done == total or time.monotonic() - said[0] >= PROGRESS_EVERY):
                err.print(f"variant {variant}: {done} of {total} conversations audited", highlight=False)
                said[0] = time.monotonic()

        report = audit(loaded, options, on_progress)
    for note in report.notes:
        if note.startswith("warning:"):
            err.print(note, highlight=False)
    return report


def fail_if_refused_everything(report: AuditReport) -> None:
    from tito_audit.audit.service import refused_everything

    reason = refused_everything(report)
    if reason is not None:
        raise AuditError(f"the template refused every conversation ({reason}); nothing could be audited")
