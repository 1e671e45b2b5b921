"""Command-line options, declared once: the option types every command shares, and option groups.

An option group is a dataclass whose fields are typer options. A command takes the whole group as one
parameter (``source: ModelSource``); :func:`with_option_groups` spreads the group's fields into the command's
signature for typer, and gathers them back into the dataclass before the command runs. A command that needs
other defaults for a group says so in the annotation: ``Annotated[Sampling, GroupDefaults(count=48)]``. One group
is not a dataclass: :class:`ReportOutputs`, whose options are the report formats of
:data:`tito_audit.formatters.registry.REPORT_FORMATS`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

import typer
from typer.models import ParameterInfo

from tito_audit.audit.audit_options import DEFAULT_COUNT
from tito_audit.conversations.generate import DEFAULT_MAX_TURNS, MAX_TURNS_LIMIT
from tito_audit.conversations.scenarios import scenario_names
from tito_audit.conversations.windows import DEFAULT_MAX_MESSAGES
from tito_audit.errors import BadInputError
from tito_audit.formatters.interface import ReportFormat
from tito_audit.formatters.registry import REPORT_FORMATS, report_format
from tito_audit.model.render_guard import DEFAULT_CLOCK, RenderLimits
from tito_audit.model.variants import parse_kwarg

# -- option types ------------------------------------------------------------------------------------
ModelArg = Annotated[
    str, typer.Argument(metavar="MODEL", help="Hub model id (org/name) or a local folder with tokenizer files.")
]
TemplateOpt = Annotated[
    Path | None,
    typer.Option("--template", metavar="FILE", help="Audit this Jinja template file instead of the model's."),
]
TemplateNameOpt = Annotated[
    str | None,
    typer.Option("--template-name", metavar="NAME", help="Pick a named template of the tokenizer (e.g. tool_use)."),
]
KwargOpt = Annotated[
    list[str],
    typer.Option(
        "--kwarg",
        metavar="NAME=VALUE",
        help="Pin a template keyword argument, name=value (JSON value or string). Repeatable.",
    ),
]
MirrorOpt = Annotated[
    list[Path],
    typer.Option(
        "--mirror", metavar="DIR", help="Folder of <org>--<name>/ model folders. Repeatable; also TITO_AUDIT_MIRROR."
    ),
]
CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        metavar="DIR",
        help="Cache of downloaded files (default templates_cache/; also TITO_AUDIT_CACHE).",
    ),
]
RevisionOpt = Annotated[
    str | None, typer.Option("--revision", metavar="REV", help="Hub revision (branch, tag or commit).")
]
NoHubOpt = Annotated[bool, typer.Option("--no-hub", help="Never contact the Hugging Face Hub.")]
RemoteCodeOpt = Annotated[
    bool, typer.Option("--trust-remote-code", help="Allow the model's own tokenizer code to run.")
]
SeedOpt = Annotated[
    int | None, typer.Option("--seed", help="Seed of the conversation generator and of non-canonical sampling.")
]
CountOpt = Annotated[int | None, typer.Option("-n", "--count", min=1, help="Number of generated conversations.")]
MaxTurnsOpt = Annotated[
    int,
    typer.Option(
        "--max-turns", min=2, max=MAX_TURNS_LIMIT, help="Maximum assistant turns per conversation (at most 100)."
    ),
]
StopTokenOpt = Annotated[
    list[str], typer.Option("--stop-token", metavar="TEXT", help="An extra stop token (its text). Repeatable.")
]
ClockOpt = Annotated[
    str | None,
    typer.Option(
        "--clock", metavar="DATE", help="Date templates see through strftime_now (ISO; default 2026-01-15T09:30)."
    ),
]
MaxCharsOpt = Annotated[
    int, typer.Option("--max-render-chars", min=1000, help="Refuse renders longer than this (characters).")
]
MaxRenderBytesOpt = Annotated[
    int,
    typer.Option(
        "--max-render-bytes",
        min=1_000_000,
        metavar="BYTES",
        help="Refuse renders whose strings and lists would take more memory than this in all (bytes).",
    ),
]
MaxSecondsOpt = Annotated[
    float,
    typer.Option(
        "--max-render-seconds", min=0.0, metavar="SECONDS", help="Refuse renders slower than this (0: no limit)."
    ),
]
ConversationsOpt = Annotated[
    list[str],
    typer.Option(
        "--conversations",
        metavar="SOURCE",
        help="Real trajectories: a JSON, JSONL, Parquet or .traj file, or a hub data set id.",
    ),
]
SplitOpt = Annotated[str, typer.Option("--split", metavar="NAME", help="Split of a hub data set.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, help="Read at most N records per source.")]
ToolsOpt = Annotated[
    Path | None,
    typer.Option(
        "--tools",
        metavar="FILE",
        help="Your tools (the OpenAI tools JSON you give your engine): generated conversations declare and call them, "
        "with arguments drawn from their schemas; records of --conversations that carry none take them too.",
    ),
]
ScenarioOpt = Annotated[
    list[str],
    typer.Option(
        "--scenario",
        metavar="PACK",
        help="An RL-environment scenario pack (repeatable): " + ", ".join(scenario_names()),
    ),
]
MaxMessagesOpt = Annotated[
    int,
    typer.Option(
        "--max-messages",
        min=0,
        help="Audit longer conversations over a window of their first turns (at most N messages); 0: all of them.",
    ),
]
WithGeneratedOpt = Annotated[
    bool,
    typer.Option("--with-generated", help="With --conversations or --scenario: audit the generated conversations too."),
]
JsonOutOpt = Annotated[Path | None, typer.Option("--json", metavar="FILE", help="Write the report as JSON here.")]
MarkdownOutOpt = Annotated[
    Path | None, typer.Option("--markdown", metavar="FILE", help="Write the report as Markdown here.")
]
"""``replay``'s and ``explain``'s outputs (their own documents; the audit report's are :class:`ReportOutputs`)."""


def output_option(report_format: ReportFormat) -> Any:
    """The option ``--NAME FILE`` that writes the report in ``report_format`` (an ``Annotated`` type for typer)."""
    return Annotated[Path | None, typer.Option(report_format.option, metavar="FILE", help=report_format.help)]


HtmlOutOpt = Annotated[
    Path | None, typer.Option(report_format("html").option, metavar="FILE", help=report_format("html").help)
]
"""``check``'s model page: the html format alone (``check --json`` writes the requirements' results)."""


ParserOpt = Annotated[
    str,
    typer.Option(
        "--parser",
        metavar="PARSER",
        help="The engine's parser between each completion and the next prompt: auto (each engine whose documented "
        "parsers for the model are installed, a verdict each; else template), template (the perfect inverse), an "
        "engine (sglang, vllm: its documented pair for the model), hf, or parser names: SGLang's as "
        "TOOL[,REASONING], vLLM's as vllm:TOOL[,REASONING].",
    ),
]


# -- option groups -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSource:
    """Where a model's files come from and which template of it is audited."""

    template: TemplateOpt = None
    template_name: TemplateNameOpt = None
    mirror: MirrorOpt = field(default_factory=list)
    cache_dir: CacheOpt = None
    revision: RevisionOpt = None
    no_hub: NoHubOpt = False
    trust_remote_code: RemoteCodeOpt = False

    def __post_init__(self) -> None:
        check_mirrors(self.mirror)


def check_mirrors(mirrors: Sequence[Path]) -> None:
    """Every ``--mirror`` is a folder: a mistyped one is its own error, not a model that cannot be found."""
    for mirror in mirrors:
        if not mirror.is_dir():
            what = "is a file, not a folder" if mirror.exists() else "no such folder"
            raise BadInputError(f"--mirror {mirror}: {what} (a mirror is a folder of <org>--<name>/ model folders)")


@dataclass(frozen=True)
class Sampling:
    """How many conversations are generated, and from which seed (``None``: the command's default)."""

    seed: SeedOpt = 0
    count: CountOpt = DEFAULT_COUNT
    max_turns: MaxTurnsOpt = DEFAULT_MAX_TURNS


@dataclass(frozen=True)
class TemplateSettings:
    """What the template is rendered with: pinned keyword arguments, extra stop tokens, its clock and limits."""

    kwarg: KwargOpt = field(default_factory=list)
    stop_token: StopTokenOpt = field(default_factory=list)
    clock: ClockOpt = None
    max_render_chars: MaxCharsOpt = RenderLimits.max_chars
    max_render_seconds: MaxSecondsOpt = RenderLimits.max_seconds
    max_render_bytes: MaxRenderBytesOpt = RenderLimits.max_bytes
    parser: ParserOpt = "auto"

    def pinned_kwargs(self, before: list[str] | None = None) -> dict[str, Any]:
        """``--kwarg`` pairs as a mapping (``before``: pairs that the command line overrides)."""
        return parse_kwargs([*(before or []), *self.kwarg])

    def parsed_clock(self) -> datetime:
        if self.clock is None:
            return DEFAULT_CLOCK
        try:
            return datetime.fromisoformat(self.clock)
        except ValueError as exc:
            raise BadInputError(
                f"--clock expects an ISO date like 2026-01-15 or 2026-01-15T09:30, got '{self.clock}'"
            ) from exc

    def limits(self) -> RenderLimits:
        return RenderLimits(self.max_render_chars, self.max_render_seconds, max_bytes=self.max_render_bytes)


@dataclass(frozen=True)
class ConversationInputs:
    """Real trajectories and scenario packs to audit instead of (or beside) generated conversations."""

    conversations: ConversationsOpt = field(default_factory=list)
    split: SplitOpt = "train"
    limit: LimitOpt = None
    tools: ToolsOpt = None
    scenario: ScenarioOpt = field(default_factory=list)
    with_generated: WithGeneratedOpt = False
    max_messages: MaxMessagesOpt = DEFAULT_MAX_MESSAGES


def parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    """``name=value`` pairs as a mapping; a malformed pair is bad input."""
    pinned: dict[str, Any] = {}
    for pair in pairs:
        try:
            name, value = parse_kwarg(pair)
        except ValueError as exc:
            raise BadInputError(str(exc)) from exc
        pinned[name] = value
    return pinned


class ReportOutputs:
    """The files a command writes the audit report to: one option ``--NAME FILE`` per format of
    :data:`~tito_audit.formatters.registry.REPORT_FORMATS` (not a dataclass: its options are the registry's)."""

    def __init__(self, **paths: Path | None) -> None:
        self.paths = paths

    @staticmethod
    def parameters() -> list[inspect.Parameter]:
        """The options, as keyword-only parameters of the command typer sees."""
        return [
            inspect.Parameter(_path_name(f), inspect.Parameter.KEYWORD_ONLY, default=None, annotation=output_option(f))
            for f in REPORT_FORMATS
        ]

    def chosen(self) -> list[tuple[ReportFormat, Path]]:
        """The formats asked for, each with its file, in the registry's order."""
        return [(f, path) for f in REPORT_FORMATS if (path := self.paths.get(_path_name(f))) is not None]


def _path_name(report_format: ReportFormat) -> str:
    return f"{report_format.name}_path"


# -- spreading groups into a command's signature ------------------------------------------------------
@dataclass(frozen=True)
class GroupDefaults:
    """Other defaults for some fields of an option group, for one command."""

    values: dict[str, Any]

    def __init__(self, **values: Any) -> None:
        object.__setattr__(self, "values", values)


Command = TypeVar("Command", bound=Callable[..., Any])

TYPE_METAVARS: dict[type, str] = {bool: "", int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}
"""What the help shows for an option's value when its declaration names nothing better (typer would show the Python
type, ``<list[Path]>``); a flag takes no value and shows none."""


def readable_metavar(annotation: object) -> None:
    """Give the typer option or argument in ``annotation`` (``Annotated[T, typer.Option(...)]``) the metavar of its
    type when it names none: ``N`` for ``int`` (a list: the element's), nothing for a flag."""
    if get_origin(annotation) is not Annotated:
        return
    kind, *extras = get_args(annotation)
    while get_origin(kind) in (Union, UnionType, list):
        kind = next(arg for arg in get_args(kind) if arg is not NoneType)
    for info in extras:
        if isinstance(info, ParameterInfo) and info.metavar is None and kind in TYPE_METAVARS:
            info.metavar = TYPE_METAVARS[kind]


def with_option_groups(command: Command) -> Command:
    """Let typer see each option-group parameter of ``command`` as the group's own options.

    Example: ``def audit(model: ModelArg, source: ModelSource)`` gets ``--template``, ``--mirror``, ... on the
    command line, and ``source`` is a :class:`ModelSource` when ``audit`` runs.
    """
    hints = get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, list[str]]] = {}
    for parameter in inspect.signature(command).parameters.values():
        annotation = hints.get(parameter.name, parameter.annotation)
        readable_metavar(annotation)
        group, defaults = _group_of(annotation)
        if group is None:
            parameters.append(parameter.replace(annotation=annotation, kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        own = _group_parameters(group, defaults)
        for option in own:
            readable_metavar(option.annotation)
        parameters += own
        groups[parameter.name] = (group, [option.name for option in own])

    @functools.wraps(command)
    def run(**values: Any) -> Any:
        for name, (group, names) in groups.items():
            values[name] = group(**{n: values.pop(n) for n in names})
        return command(**values)

    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return cast(Command, run)


def _group_parameters(group: type, defaults: dict[str, Any]) -> list[inspect.Parameter]:
    """The options of ``group`` as keyword-only parameters, with the command's ``defaults`` for some."""
    if group is ReportOutputs:
        return ReportOutputs.parameters()
    hints = get_type_hints(group, include_extras=True)
    return [
        inspect.Parameter(
            item.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=defaults.get(item.name, _field_default(item)),
            annotation=hints[item.name],
        )
        for item in fields(group)
    ]


def _group_of(annotation: object) -> tuple[type | None, dict[str, Any]]:
    defaults: dict[str, Any] = {}
    if get_origin(annotation) is Annotated:
        annotation, *extras = get_args(annotation)
        for extra in extras:
            if isinstance(extra, GroupDefaults):
                defaults.update(extra.values)
    if isinstance(annotation, type) and annotation in OPTION_GROUPS:
        return annotation, defaults
    return None, {}


def _field_default(item: Field[Any]) -> Any:
    if item.default is not MISSING:
        return item.default
    if item.default_factory is not MISSING:
        return item.default_factory()
    raise TypeError(f"option {item.name} has no default")


OPTION_GROUPS = (ModelSource, Sampling, TemplateSettings, ConversationInputs, ReportOutputs)
