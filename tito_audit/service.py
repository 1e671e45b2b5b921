"""The audit service: one loaded model in, one :class:`~tito_audit.results.AuditReport` out.

Wires the layers: variants from the template source, generated conversations, shape retries, the
simulated rollout and its checks, aggregation into per-check tables, the verdict per variant.
"""

from __future__ import annotations

import importlib.metadata
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tito_audit import __version__
from tito_audit.causes import EMPTY_THINK
from tito_audit.conversation import TOOL, Conversation, steps_of
from tito_audit.diff import first_difference, text_window
from tito_audit.errors import BadInputError
from tito_audit.generate import DEFAULT_MAX_TURNS, generate, tool_schemas
from tito_audit.model import JINJA, LoadedModel
from tito_audit.realize import RealizedConversation, UnrealizedTurn, realizable_reasoning, realize, turn_keys
from tito_audit.render import (
    ALTERNATE_CLOCK,
    DEFAULT_CLOCK,
    PrefixRenderError,
    RenderedPrefix,
    Renderer,
    RenderError,
    RenderLimits,
    frozen_clock,
)
from tito_audit.results import (
    BROKEN,
    CHECKS,
    READY,
    READY_TOOL_ONLY,
    UNSUPPORTED,
    AuditReport,
    CheckResult,
    DriftSummary,
    Failure,
    Finding,
    ModelInfo,
    RefusedShape,
    Settings,
    UnrealizableTurns,
    VariantResult,
    worst_verdict,
)
from tito_audit.shapes import (
    NOT_NATIVE_TOOLS,
    apply_changes,
    candidate_change_sets,
    describe_shape,
    first_calls_only,
    missing_from_render,
    without_tool_calls,
)
from tito_audit.simulate import FAILED, REFUSED, Outcome, RolloutSimulator, render_failure_reason
from tito_audit.stops import collect_stop_tokens
from tito_audit.tokens import TokenCodec
from tito_audit.validate import validate_conversations
from tito_audit.variants import Variant, template_inputs, variants_for

SCHEMA_VERSION = 1
DEFAULT_COUNT = 96
NONDETERMINISM_SAMPLE = 6

ProgressCallback = Callable[[str, int, int], None]
ConversationSource = Callable[[tuple[str, ...] | None], list[Conversation]]
"""The conversations to audit for a variant, given the reasoning kinds a model can produce under it."""


@dataclass
class AuditOptions:
    seed: int = 0
    count: int = DEFAULT_COUNT
    max_turns: int = DEFAULT_MAX_TURNS
    pinned_kwargs: dict[str, Any] = field(default_factory=dict)
    clock: datetime = DEFAULT_CLOCK
    extra_stop_tokens: list[str] = field(default_factory=list)
    max_examples_per_group: int | None = None
    """Keep only this many failures per (check, aspect, category, causes) group; None keeps all."""
    conversations: Sequence[Conversation] | None = None
    """Conversations to audit instead of generated ones (the seam for real trajectories)."""
    with_generated: bool = False
    """With ``conversations``: audit the generated conversations too (first)."""
    conversations_source: str = "generated"
    datasets: list[dict[str, Any]] = field(default_factory=list)
    limits: RenderLimits = field(default_factory=RenderLimits)


@dataclass
class _Refusal:
    reason: str
    shape: str
    conversation_id: str
    accepted_after: tuple[str, ...] | None


def library_versions() -> dict[str, str]:
    versions = {}
    for name in ("transformers", "tokenizers", "jinja2", "huggingface_hub", "mistral_common"):
        try:
            versions[name] = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _structure(conversation: Conversation) -> tuple:
    """The roles in order, with the number of calls of each assistant message: what refusals depend on."""
    return tuple((m.get("role"), len(m.get("tool_calls") or [])) for m in conversation.messages)


def _call_signature(conversation: Conversation) -> tuple:
    """What decides whether a template renders a tool call: per calling turn, the content kind, whether it
    carries reasoning, the number of calls and the argument types, and whether tools are declared."""
    turns = []
    for message in conversation.messages:
        calls = message.get("tool_calls") or []
        if calls:
            content = message.get("content")
            turns.append(
                (
                    "none" if content is None else "empty" if content == "" else "text",
                    "reasoning_content" in message,
                    min(len(calls), 2),
                    tuple(sorted({type(c["function"].get("arguments")).__name__ for c in calls})),
                )
            )
    return (tuple(sorted(set(turns))), conversation.tools is not None)


class VariantAudit:
    """Audits one variant: accepts (or retries) each conversation, simulates it, aggregates."""

    def __init__(self, model: LoadedModel, codec: TokenCodec, variant: Variant, options: AuditOptions) -> None:
        self.model = model
        self.codec = codec
        self.variant = variant
        self.options = options
        self.renderer = Renderer(model, codec, variant.kwargs, options.limits)
        self._preferred: dict[str, list[tuple[str, ...]]] = defaultdict(list)
        self._hopeless: dict[tuple, bool] = {}
        """Refusals no shape change rescued, by reason and conversation structure."""
        self._ablation: dict[tuple, str | None] = {}
        """Whether a template drops tool calls, by the shape of the calls (see :func:`_call_signature`)."""

    def _try(self, conversation: Conversation) -> tuple[dict | None, str | None]:
        """The rollout renders of ``conversation``, or why the template refuses it.

        The whole conversation is rendered first: most refusals show there, and are found at the cost of
        one render; the other prefixes follow only for a conversation the template accepts.
        """
        messages, tools = conversation.messages, conversation.tools
        last = (len(messages), False)
        try:
            renders = self.renderer.prefixes(messages, tools, [last])
        except PrefixRenderError as exc:
            return None, render_failure_reason(exc)
        full = renders[last].text
        if missing_from_render(conversation, full):
            return None, "the render drops tool results"
        dropped = self._drops_calls(conversation, full)
        if dropped:
            return None, dropped
        try:
            rest = [key for key in turn_keys(messages) if key != last]
            renders.update(self.renderer.prefixes(messages, tools, rest))
        except PrefixRenderError as exc:
            return None, render_failure_reason(exc)
        return renders, None

    def _drops_calls(self, conversation: Conversation, full: str) -> str | None:
        """Why the render drops tool calls (it renders the same without them), or None; cached per call shape."""
        signature = _call_signature(conversation)
        if signature in self._ablation:
            return self._ablation[signature]
        for ablate, reason in (
            (without_tool_calls, "the render drops tool calls"),
            (first_calls_only, "the render drops parallel tool calls after the first"),
        ):
            ablated = ablate(conversation) if any(m.get("tool_calls") for m in conversation.messages) else None
            if ablated is None:
                continue
            try:
                if self.renderer.text(ablated.messages, conversation.tools, False) == full:
                    self._ablation[signature] = reason
                    return reason
            except RenderError:
                continue
        self._ablation[signature] = None
        return None

    def accept(
        self, conversation: Conversation
    ) -> tuple[Conversation | None, dict[tuple[int, bool], RenderedPrefix] | None, _Refusal | None]:
        """The conversation in the first shape the template renders faithfully (itself when it does), with the
        renders every assistant turn needs; the refusal, when there was one."""
        renders, reason = self._try(conversation)
        if reason is None:
            return conversation, renders, None
        assert reason is not None
        key = reason.split(" (rendering", 1)[0]
        structure = (key, tuple(sorted(conversation.shape.items())), _structure(conversation))
        if self._hopeless.get(structure):
            # The same refusal of the same structure was already retried with every change set in vain.
            return None, None, _Refusal(key, describe_shape(conversation), conversation.id, None)
        for changes in candidate_change_sets(conversation, self._preferred[key]):
            retried = apply_changes(conversation, changes)
            renders, retry_reason = self._try(retried)
            if retry_reason is None:
                names = tuple(change.name for change in changes)
                if names not in self._preferred[key]:
                    self._preferred[key].insert(0, names)
                return retried, renders, _Refusal(key, describe_shape(conversation), conversation.id, names)
        self._hopeless[structure] = True
        return None, None, _Refusal(key, describe_shape(conversation), conversation.id, None)

    def realize(self, conversation: Conversation, renders: dict) -> RealizedConversation:
        """``conversation`` with every assistant turn in a form a model could produce after its prompt."""
        return realize(conversation, renders, self.renderer.prefixes)

    def run(self, conversations_for: ConversationSource, progress: ProgressCallback | None) -> VariantResult:
        """Audit the conversations ``conversations_for`` gives for the reasoning kinds this variant allows."""
        options = self.options
        with frozen_clock(self.model.template_source, options.clock):
            allowed = realizable_reasoning(self.renderer.prefixes, tool_schemas())
            conversations = conversations_for(allowed)
            stop_tokens = collect_stop_tokens(
                self.renderer, self.codec, self.model.generation_eos_ids, options.extra_stop_tokens
            )
            simulator = RolloutSimulator(
                self.renderer,
                self.codec,
                [s.id for s in stop_tokens],
                options.seed,
                text_only=self.model.text_level_only,
            )
            checks = {name: CheckResult(name) for name in CHECKS}
            failures: list[Failure] = []
            refusals: list[_Refusal] = []
            unrealized: list[UnrealizedTurn] = []
            drift = DriftSummary()
            accepted: list[tuple[Conversation, str]] = []
            native_tool_conversations = 0
            notes: list[str] = []
            totals = Outcome()
            for number, conversation in enumerate(conversations, start=1):
                audited, renders, refusal = self.accept(conversation)
                if refusal is not None:
                    refusals.append(refusal)
                if audited is None or renders is None:
                    self._count_refused(checks, conversation)
                else:
                    changes = list(refusal.accepted_after or ()) if refusal is not None else []
                    if audited.has_tool_traffic() and not set(changes) & NOT_NATIVE_TOOLS:
                        native_tool_conversations += 1
                    realized = self.realize(audited, renders)
                    unrealized += realized.unrealized
                    audited = realized.conversation
                    outcome = simulator.run(audited, realized.renders, realized.alignments)
                    for failure in outcome.failures:
                        failure.shape_changes = changes
                    self._merge(outcome, checks, failures, drift, totals)
                    accepted.append((audited, realized.renders[(len(audited.messages), False)].text))
                if progress is not None:
                    progress(self.variant.name, number, len(conversations))
            findings = self._nondeterminism(accepted)
        findings += self._bos_duplication(accepted)
        if totals.gen_prompt_mismatches:
            findings.append(
                Finding(
                    "gen-prompt-mismatch",
                    f"{totals.gen_prompt_mismatches} of {totals.completions} assistant turns: the generation prompt "
                    "is not a prefix of the turn as the template renders it, in any form a model could produce",
                )
            )
        if totals.completions_without_stop:
            notes.append(
                f"{totals.completions_without_stop} of {totals.completions} completions contain no stop token "
                "(the whole generated text was taken as sampled)"
            )
        verdict, reason = self._verdict(checks, native_tool_conversations)
        for check in checks.values():
            check.rows.sort(key=lambda row: row.category)
        if allowed is not None and (options.conversations is None or options.with_generated):
            notes.append(
                "generated assistant turns carry reasoning only as a model can produce it after this variant's "
                f"generation prompt: {', '.join(allowed)} (other kinds of the grid take the nearest of these)"
            )
        checks["rollout"].notes.extend(notes)
        if self.model.text_level_only:
            checks["roundtrip"].notes.append("not applicable: text-level audit (no vocabulary)")
            checks["rollout"].notes.append("text stability only: seam and drift need the real vocabulary")
        return VariantResult(
            name=self.variant.name,
            kwargs=dict(self.variant.kwargs),
            verdict=verdict,
            verdict_reason=reason,
            checks=checks,
            failures=self._examples(failures),
            refused=self._group_refusals(refusals),
            drift=drift,
            stop_tokens=stop_tokens,
            findings=findings,
            conversations=len(conversations),
            conversations_audited=len(accepted),
            unrealizable=group_unrealized(unrealized),
            assistant_turns=totals.completions,
        )

    # -- aggregation ------------------------------------------------------------------------------
    @staticmethod
    def _count_refused(checks: dict[str, CheckResult], conversation: Conversation) -> None:
        messages = conversation.messages
        for k in range(1, len(messages)):
            row = checks["append"].row(f"{messages[k].get('role')} after {messages[k - 1].get('role')}")
            row.refused += 1
            row.cases += 1
        for step in steps_of(messages):
            for name in ("rollout", "bridge") if step.kind == TOOL else ("rollout",):
                row = checks[name].row(step.kind)
                row.refused += 1
                row.cases += 1
        for _ in conversation.assistant_indices():
            row = checks["roundtrip"].row("completion (canonical)")
            row.refused += 1
            row.cases += 1

    @staticmethod
    def _merge(
        outcome: Outcome,
        checks: dict[str, CheckResult],
        failures: list[Failure],
        drift: DriftSummary,
        totals: Outcome,
    ) -> None:
        for tally in outcome.tallies:
            row = checks[tally.check].row(tally.category)
            row.cases += 1
            if tally.status == FAILED:
                row.failed += 1
            elif tally.status == REFUSED:
                row.refused += 1
            else:
                row.passed += 1
        for failure in outcome.failures:
            if failure.aspect.startswith("drift"):
                continue  # drift is reported beside the verdict, in the drift summary
            counts = checks[failure.check].cause_counts
            for cause in failure.causes:
                counts[cause] = counts.get(cause, 0) + 1
        failures.extend(outcome.failures)
        tally = outcome.drift
        drift.steps += tally.steps
        drift.canonical_drift_steps += tally.canonical
        drift.noncanonical_drift_steps += tally.noncanonical
        drift.rollouts += 1
        drift.rollouts_with_mismatch += tally.mismatched_tokens > 0
        drift.mismatched_tokens += tally.mismatched_tokens
        drift.mismatched_tokens_noncanonical += tally.mismatched_tokens_noncanonical
        drift.total_tokens += tally.total_tokens
        for cause, count in tally.causes.items():
            drift.causes[cause] = drift.causes.get(cause, 0) + count
        totals.gen_prompt_mismatches += outcome.gen_prompt_mismatches
        totals.completions += outcome.completions
        totals.completions_without_stop += outcome.completions_without_stop

    def _examples(self, failures: list[Failure]) -> list[Failure]:
        """Keep the first few failures of each (check, aspect, category, causes) group; counts stay complete."""
        if self.options.max_examples_per_group is None:
            return failures
        kept: list[Failure] = []
        seen: dict[tuple, int] = defaultdict(int)
        for failure in failures:
            key = (failure.check, failure.aspect, failure.category, tuple(failure.causes))
            if seen[key] < self.options.max_examples_per_group:
                kept.append(failure)
            seen[key] += 1
        return kept

    @staticmethod
    def _group_refusals(refusals: list[_Refusal]) -> list[RefusedShape]:
        groups: dict[tuple[str, tuple[str, ...] | None], list[_Refusal]] = defaultdict(list)
        for refusal in refusals:
            groups[(refusal.reason, refusal.accepted_after)].append(refusal)
        out = []
        for (reason, after), members in sorted(
            groups.items(), key=lambda item: (-len(item[1]), item[0][0], str(item[0][1]))
        ):
            shapes = sorted({m.shape for m in members})
            out.append(
                RefusedShape(
                    reason=reason,
                    shapes=shapes[:5],
                    count=len(members),
                    example_conversation=members[0].conversation_id,
                    accepted_after=list(after) if after is not None else None,
                )
            )
        return out

    # -- verdict ----------------------------------------------------------------------------------
    @staticmethod
    def _verdict(checks: dict[str, CheckResult], native_tool_conversations: int) -> tuple[str, str]:
        rows = {row.category: row for row in checks["rollout"].rows}
        tool = rows.get(TOOL)
        causes = ", ".join(sorted(checks["rollout"].cause_counts)) or "no cause"
        if native_tool_conversations == 0 or tool is None or tool.cases - tool.refused == 0:
            return UNSUPPORTED, "no conversation with tool calls and tool results rendered faithfully"
        if tool.failed:
            return BROKEN, (
                f"{tool.failed} of {tool.cases - tool.refused} tool-only steps are not text- or seam-stable ({causes})"
            )
        other = [row for category, row in rows.items() if category != TOOL and row.failed]
        if other:
            failed = sum(r.failed for r in other)
            audited = sum(r.cases - r.refused for r in other)
            kinds = "/".join(sorted(r.category for r in other))
            return READY_TOOL_ONLY, (
                f"every tool-only step is stable; {failed} of {audited} steps with {kinds} messages are not ({causes})"
            )
        return READY, "every appended step is text- and seam-stable"

    # -- findings beside the verdict --------------------------------------------------------------
    def _nondeterminism(self, accepted: list[tuple[Conversation, str]]) -> list[Finding]:
        """Render a few conversations again, with the same and with another clock; any difference is a finding."""
        findings: list[Finding] = []
        sample = accepted[:NONDETERMINISM_SAMPLE]
        for label, clock in (
            ("a second render with the same clock", self.options.clock),
            ("another date", ALTERNATE_CLOCK),
        ):
            with frozen_clock(self.model.template_source, clock):
                for conversation, text in sample:
                    last = (len(conversation.messages), False)
                    try:
                        again = self.renderer.prefixes(conversation.messages, conversation.tools, [last])[last].text
                    except RenderError:
                        continue
                    index = first_difference(text, again)
                    if index is not None or len(text) != len(again):
                        index = index if index is not None else min(len(text), len(again))
                        findings.append(
                            Finding(
                                "nondeterministic-template",
                                f"rendering {conversation.id} with {label} gives different text at character {index}",
                                evidence=f"{text_window(text, index, 40)!r} vs {text_window(again, index, 40)!r}",
                            )
                        )
                        break
        return findings

    def _bos_duplication(self, accepted: list[tuple[Conversation, str]]) -> list[Finding]:
        bos = self.codec.bos_id
        if bos is None or not accepted or self.model.backend != JINJA:
            return []
        text = accepted[0][1]
        ids = self.codec.encode_with_default_specials(text)
        if ids[:2] == [bos, bos]:
            return [
                Finding(
                    "bos-duplication",
                    "the template writes the BOS token and tokenizer(text) with default arguments adds another; "
                    "tokenize rendered text with add_special_tokens=False",
                    evidence=f"first ids {ids[:3]}",
                )
            ]
        return []


OPEN_REASONING_AT_END = re.compile(r"<(think|thinking|seed:think|reasoning)>\s*$")


def unrealizable_reason(original: str, audited_as: str, prompt: str) -> str:
    """Why a turn's original form cannot follow ``prompt`` (the generation prompt), read from the prompt."""
    closed = EMPTY_THINK.search(prompt)
    if closed is not None:
        block = closed.group(0)
        return f"the generation prompt already closes the reasoning block ({block!r}): {original} cannot follow it"
    opened = OPEN_REASONING_AT_END.search(prompt)
    if opened is not None:
        return (
            f"the generation prompt opens a reasoning block ({opened.group(0).strip()!r}): {original} cannot follow it"
        )
    return f"only {audited_as} aligns with the generation prompt"


def group_unrealized(turns: Sequence[UnrealizedTurn]) -> list[UnrealizableTurns]:
    """Unrealizable turns grouped by (original form, form audited instead), largest group first."""
    groups: dict[tuple[str, str], list[UnrealizedTurn]] = defaultdict(list)
    for turn in turns:
        groups[(turn.original, turn.audited_as)].append(turn)
    out = []
    for (original, audited_as), members in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        first = members[0]
        out.append(
            UnrealizableTurns(
                original=original,
                audited_as=audited_as,
                reason=unrealizable_reason(original, audited_as, first.prompt),
                count=len(members),
                conversations=len({m.conversation_id for m in members}),
                shapes=sorted({m.shape for m in members})[:5],
                example_conversation=first.conversation_id,
                example_turn=first.turn,
                prompt=first.prompt,
            )
        )
    return out


def conversation_source(options: AuditOptions) -> ConversationSource:
    """The conversations to audit for a variant, given the reasoning kinds it allows: the given ones as they
    are, or the generated ones drawn for those kinds (generated once per distinct set of kinds)."""
    given = list(options.conversations) if options.conversations is not None else None
    if given is not None:
        validate_conversations(given)
    generated: dict[tuple[str, ...] | None, list[Conversation]] = {}

    def for_kinds(allowed: tuple[str, ...] | None) -> list[Conversation]:
        if given is not None and not options.with_generated:
            return given
        if allowed not in generated:
            drawn = list(generate(options.count, options.seed, options.max_turns, allowed))
            generated[allowed] = drawn + (given or [])
        return generated[allowed]

    return for_kinds


def refused_everything(report: AuditReport) -> str | None:
    """Why no conversation could be audited in any variant (the template refuses every shape), else None."""
    if any(variant.conversations_audited for variant in report.variants):
        return None
    reasons = [shape.reason for variant in report.variants for shape in variant.refused]
    return reasons[0] if reasons else "no conversation to audit"


def audit(
    loaded: LoadedModel, options: AuditOptions | None = None, progress: ProgressCallback | None = None
) -> AuditReport:
    """Audit ``loaded`` under every relevant variant of its template and return the report."""
    options = options or AuditOptions()
    if options.count < 1 and options.conversations is None:
        raise BadInputError("--count must be at least 1")
    started = time.monotonic()
    codec = TokenCodec(
        loaded.tokenizer, piecewise_control_tokens=loaded.backend != JINJA, template_source=loaded.template_source
    )
    notes: list[str] = list(loaded.notes)
    if loaded.template_source is not None:
        inputs = template_inputs(loaded.template_source, codec.tokenizer.special_tokens_map.keys())
        known = {item.name for item in inputs}
        for name in sorted(set(options.pinned_kwargs) - known):
            notes.append(f"warning: --kwarg {name} is not read by the template as a keyword argument")
    else:
        inputs = []
        notes.append(
            f"{loaded.resolved.model_id} renders through {loaded.backend} without Jinja: "
            "there are no template variants to detect"
        )
    variants = variants_for(inputs, options.pinned_kwargs)
    conversations_for = conversation_source(options)
    results = [VariantAudit(loaded, codec, variant, options).run(conversations_for, progress) for variant in variants]
    resolved = loaded.resolved
    return AuditReport(
        schema_version=SCHEMA_VERSION,
        tool_version=__version__,
        library_versions=library_versions(),
        model=ModelInfo(
            model_id=resolved.model_id,
            source=resolved.source,
            path=resolved.location or str(resolved.path),
            revision=resolved.revision,
            backend=loaded.backend,
            tokenizer_class=loaded.tokenizer_class,
            template_name=loaded.template_name,
            template_origin=loaded.template_origin,
            template_sha256=loaded.template_sha256,
            available_templates=list(loaded.available_templates),
            file_sha256=loaded.file_hashes,
            generation_config_found=loaded.generation_config_found,
        ),
        settings=Settings(
            seed=options.seed,
            count=results[0].conversations if results else 0,
            max_turns=options.max_turns,
            pinned_kwargs=dict(options.pinned_kwargs),
            clock=options.clock.isoformat(),
            extra_stop_tokens=list(options.extra_stop_tokens),
            conversations_source=options.conversations_source,
            datasets=list(options.datasets),
        ),
        template_inputs={item.name: list(item.values) for item in inputs},
        verdict=worst_verdict([r.verdict for r in results]),
        text_level_only=loaded.text_level_only,
        variants=results,
        notes=notes,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration_seconds=round(time.monotonic() - started, 3),
    )
