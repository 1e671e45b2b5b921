"""One variant's audit: accept (or reshape) each conversation, realize its turns, run the checks, aggregate,
then the findings and the verdict.

The path of one conversation: :class:`~tito_audit.audit.realization.acceptance.Acceptor` (renders or a refusal) →
:func:`~tito_audit.audit.realization.realize.realize` (each assistant turn in a form a model could produce) →
:class:`~tito_audit.audit.checks.rollout_context.RolloutContext` → :func:`~tito_audit.audit.checks.run_checks` →
:class:`~tito_audit.audit.aggregate.VariantTotals`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from tito_audit.audit.aggregate import (
    VariantTotals,
    group_refusals,
    group_unrealized,
    keep_examples,
    steps_by_form,
    steps_by_shape,
)
from tito_audit.audit.audit_options import AuditOptions, ConversationSource, ProgressCallback
from tito_audit.audit.checks import run_checks
from tito_audit.audit.checks.mask import variant_notes as mask_notes
from tito_audit.audit.checks.rollout_context import CheckSetup, RolloutContext
from tito_audit.audit.checks.undo_reruns import (
    TRIED_CONVERSATIONS,
    TRIED_OTHER_SETTINGS,
    Budget,
    ConversationUndos,
    WalkedStep,
    last_failing,
    settle,
    simulated_walk,
    turn_forms,
)
from tito_audit.audit.conditions.step_conditions import SETTING, tag
from tito_audit.audit.conditions.undoings import shared_prefix
from tito_audit.audit.conditions.verdict_conditions import conditions_of, tally_steps
from tito_audit.audit.findings import FindingContext, run_findings
from tito_audit.audit.generation import generation_profile
from tito_audit.audit.parse_step.parse_memo import ParseMemo
from tito_audit.audit.parse_step.parsed_rollout import parsed_rollout
from tito_audit.audit.parse_step.parsed_totals import ParsedTotals
from tito_audit.audit.parse_step.parsed_undo import parsed_walk, settle_parsed
from tito_audit.audit.parse_step.written_values import LiteralCache, ValueTotals, written_values
from tito_audit.audit.realization.acceptance import Acceptor, Renders
from tito_audit.audit.realization.realize import RealizedConversation, realize, turn_keys
from tito_audit.audit.realization.reasoning_block import VariantReasoning, variant_reasoning
from tito_audit.audit.realization.stops import collect_stop_tokens, model_end_token
from tito_audit.audit.results import Failure, StopToken, VariantResult, Walked
from tito_audit.audit.verdict import verdict_for
from tito_audit.conversations.conversation import USER, Conversation
from tito_audit.conversations.profile import GenerationProfile
from tito_audit.conversations.reasoning_forms import CLOSED, OPEN
from tito_audit.conversations.shapes import NOT_NATIVE_TOOLS
from tito_audit.conversations.tools import tool_schemas
from tito_audit.model.load_folder import LoadedModel
from tito_audit.model.registry import TEXT_BEFORE_CALLS, registry_habit
from tito_audit.model.render import Renderer, RenderError, frozen_clock
from tito_audit.model.threads import cached_property
from tito_audit.model.tokens import TokenCodec
from tito_audit.model.variants import Variant
from tito_audit.parse.output_layouts import OutputLayout, output_layout
from tito_audit.parse.parser import TEMPLATE, CompletionParser

_STATE_WORDS = {OPEN: "opens", CLOSED: "closes"}

StepStatuses = dict[tuple[str, str, int], bool]
"""(``template`` or a parser's name, conversation id, the step's turn) -> whether the buffer followed."""


class VariantAudit:
    """Audits one variant of one model."""

    def __init__(
        self,
        model: LoadedModel,
        codec: TokenCodec,
        variant: Variant,
        options: AuditOptions,
        parsers: Sequence[CompletionParser] = (),
    ) -> None:
        self.parsers = list(parsers)
        """Each engine's parser between each completion and the next prompt, one rollout with a parser each (none:
        the perfect inverse only)."""
        self.model = model
        self.codec = codec
        self.variant = variant
        self.options = options
        self.renderer = Renderer(model, codec, variant.kwargs, options.limits)
        self.acceptor = Acceptor(self.renderer)
        self.steps: StepStatuses = {}
        """How each step went, by (``template`` or the parser's name, conversation id, the step's turn), once
        :meth:`run` has walked it: a variant of another setting reads the default setting's."""

    def accept(self, conversation: Conversation):
        """See :meth:`tito_audit.audit.realization.acceptance.Acceptor.accept`."""
        return self.acceptor.accept(conversation)

    @cached_property
    def layout(self) -> OutputLayout | None:
        """The layout the family's model writes its turns in, where it differs from the template's history."""
        return output_layout(self.model.resolved.model_id)

    @cached_property
    def rare_form(self) -> str | None:
        """The words of the rare form of the family's habit of text before each call (None without that habit)."""
        model_id = self.model.resolved.model_id
        habit = registry_habit(model_id) if model_id else None
        return habit.rare_form if habit is not None and habit.habit == TEXT_BEFORE_CALLS else None

    @cached_property
    def profile(self) -> GenerationProfile:
        """What a model behind this variant's template writes (:mod:`tito_audit.audit.generation`)."""
        with frozen_clock(self.model.template_source, self.options.clock):
            return generation_profile(
                self.renderer.text_or_none,
                self.codec,
                self.model.resolved.model_id,
                self.reasoning,
                self.options.tools,
            )

    @cached_property
    def reasoning(self) -> VariantReasoning:
        """The template's reasoning block and the reasoning forms this variant's generation prompt admits."""
        with frozen_clock(self.model.template_source, self.options.clock):
            return variant_reasoning(self.renderer.text_or_none, tool_schemas())

    def realize(self, conversation: Conversation, renders: Renders) -> RealizedConversation:
        """``conversation`` with every assistant turn in a form a model could produce after its prompt."""
        return realize(conversation, renders, self.renderer.prefixes, self.renderer.texts, self.reasoning.block)

    def probe_prompt(self) -> str | None:
        """The generation prompt this variant writes after one user message (None when it refuses)."""
        with frozen_clock(self.model.template_source, self.options.clock):
            try:
                return self.renderer.text([{"role": USER, "content": "Hello there."}], None, True)
            except RenderError:
                return None

    def check_setup(self) -> tuple[list[StopToken], CheckSetup]:
        """The variant's stop tokens and the machinery the checks of all its conversations share (call it inside
        the template's frozen clock)."""
        model = self.model
        stop_tokens = collect_stop_tokens(
            self.renderer,
            self.codec,
            model.generation_eos_ids,
            self.options.extra_stop_tokens,
            model.resolved.model_id,
            model.text_level_only,
        )
        setup = CheckSetup.create(
            self.renderer,
            self.codec,
            [s.id for s in stop_tokens],
            self.options.seed,
            model.text_level_only,
            model_end_token(stop_tokens),
            self.rare_form,
        )
        return stop_tokens, setup

    def _walked_again(
        self, setup: CheckSetup, walked: RolloutContext
    ) -> Callable[[Conversation], RolloutContext | None]:
        """A conversation walked again with a condition undone, as a rollout context: rendered as it is (no other shape
        tried; None when the template refuses it; the renders of the prefixes it shares with ``walked``, the
        conversation as walked, taken from there), realized; each one built once (the simulated rollout and every
        parser read the same)."""
        built: dict[int, tuple[Conversation, RolloutContext | None]] = {}
        before = walked.conversation.messages

        def context_of(conversation: Conversation) -> RolloutContext | None:
            key = id(conversation)
            if key not in built:
                messages = conversation.messages
                same = shared_prefix(messages, before)
                keys = turn_keys(messages)
                renders = {key: walked.renders[key] for key in keys if key[0] <= same and key in walked.renders}
                context = None
                try:
                    missing = [key for key in keys if key not in renders]
                    renders.update(self.renderer.prefixes(messages, conversation.tools, missing))
                    realized = self.realize(conversation, renders)
                    context = RolloutContext(setup, realized.conversation, realized.renders, realized.alignments)
                except RenderError:
                    pass
                built[key] = (conversation, context)  # the conversation kept: its id stays its own
            return built[key][1]

        return context_of

    def _by_setting(
        self, result: str, conversation: str, steps: Sequence[WalkedStep], default: StepStatuses | None
    ) -> None:
        """Record how each step of ``result`` (``template`` or a parser's name) went (:attr:`steps`); under another
        setting than the default (``default``: the default setting's steps), a failing step that holds under the
        default setting holds without this setting."""
        setting = tag(SETTING, f"with {self.variant.name}")
        for step in steps:
            self.steps[(result, conversation, step.turn)] = step.followed
            if default is None or step.followed or (result, conversation, step.turn) not in default:
                continue
            step.tried.append(setting)
            if default[(result, conversation, step.turn)]:
                step.held_without.append(setting)

    def run(
        self,
        conversations_for: ConversationSource,
        progress: ProgressCallback | None,
        default: StepStatuses | None = None,
    ) -> VariantResult:
        """Audit the conversations ``conversations_for`` gives for the reasoning kinds this variant allows;
        ``default``: the steps of the default setting's audit (:attr:`steps`), for a variant of another setting."""
        options, model = self.options, self.model
        totals = VariantTotals()
        parsed = [ParsedTotals() for _ in self.parsers]
        values_parser = self.parsers[0] if self.parsers else None
        values = ValueTotals()
        literals = LiteralCache()
        accepted: list[tuple[Conversation, str]] = []
        native_tool_conversations = 0
        cap = TRIED_CONVERSATIONS if default is None else TRIED_OTHER_SETTINGS
        budgets: dict[str, Budget] = defaultdict(lambda: Budget(cap))
        """Per rollout (``template`` or a parser's name): what it walked again so far."""
        with frozen_clock(model.template_source, options.clock):
            allowed = self.reasoning.kinds
            conversations = conversations_for(self.profile)
            stop_tokens, setup = self.check_setup()
            for number, conversation in enumerate(conversations, start=1):
                audited, renders, refusal = self.accept(conversation)
                if refusal is not None:
                    totals.refusals.append(refusal)
                if audited is None or renders is None:
                    totals.add_refused(conversation)
                else:
                    changes = list(refusal.accepted_after or ()) if refusal is not None else []
                    if audited.has_tool_traffic() and not set(changes) & NOT_NATIVE_TOOLS:
                        native_tool_conversations += 1
                    realized = self.realize(audited, renders)
                    totals.unrealized += realized.unrealized
                    context = RolloutContext(setup, realized.conversation, realized.renders, realized.alignments)
                    outcome = run_checks(context)
                    keep_walked(outcome.failures, realized)
                    failing = {key[1]: f.causes for key, f in outcome.located if key[0] == 1 and key[2:] == (0, 0)}
                    memos = [ParseMemo(parser) for parser in self.parsers]
                    walked = [parsed_rollout(context, failing, memo, options.seed, self.layout) for memo in memos]
                    until = last_failing(outcome.walked, *(found.walked for found in walked))
                    undos = ConversationUndos(context.conversation, turn_forms(context), until)
                    context_of = self._walked_again(setup, context)
                    settle(outcome.walked, undos, simulated_walk(context_of), budgets[TEMPLATE])
                    self._by_setting(TEMPLATE, context.conversation.id, outcome.walked, default)
                    outcome.count_conditions()
                    totals.add(outcome, changes)
                    totals.add_shapes(realized.conversation, outcome)
                    for memo, totals_parsed, outcome_parsed in zip(memos, parsed, walked, strict=True):
                        parser = memo.parser
                        walk = parsed_walk(context_of, memo, options.seed, self.layout)
                        held = settle_parsed(outcome_parsed, undos, walk, budgets[parser.name])
                        self._by_setting(parser.name, context.conversation.id, outcome_parsed.walked, default)
                        outcome_parsed.close(held)
                        totals_parsed.add(outcome_parsed, changes)
                    values.add(written_values(context, values_parser, options.seed, literals, self.layout))
                    last = (len(realized.conversation.messages), False)
                    accepted.append((realized.conversation, realized.renders[last].text))
                if progress is not None:
                    progress(self.variant.name, number, len(conversations))
            findings = run_findings(
                FindingContext(
                    model,
                    self.codec,
                    self.renderer,
                    options.clock,
                    accepted,
                    totals.completions,
                    totals.gen_prompt_mismatches,
                )
            )
        verdict, reason = verdict_for(totals.checks, native_tool_conversations)
        tallies = tally_steps(totals.conditions)
        forms = steps_by_form(totals.forms)
        self._notes(totals, allowed)
        return VariantResult(
            name=self.variant.name,
            kwargs=dict(self.variant.kwargs),
            verdict=verdict,
            verdict_reason=reason,
            checks=totals.checks,
            failures=keep_examples(totals.failures, options.max_examples_per_group),
            refused=group_refusals(totals.refusals),
            drift=totals.drift,
            stop_tokens=stop_tokens,
            findings=findings,
            conversations=len(conversations),
            conversations_audited=len(accepted),
            unrealizable=group_unrealized(totals.unrealized),
            steps_by_form=forms,
            steps_by_shape=steps_by_shape(totals.shapes),
            assistant_turns=totals.completions,
            parses=[
                totals_parsed.result(
                    parser,
                    native_tool_conversations,
                    keep_examples(totals_parsed.failures, options.max_examples_per_group),
                    self.rare_form,
                )
                for parser, totals_parsed in zip(self.parsers, parsed, strict=True)
            ],
            values=values.result(),
            values_parser=values_parser.name if values_parser is not None else TEMPLATE,
            value_failures=values.failures,
            conditions=conditions_of(tallies, verdict),
        )

    def _notes(self, totals: VariantTotals, allowed: tuple[str, ...] | None) -> None:
        """Sort the check tables and add the notes a reader needs beside them."""
        checks = totals.checks
        for check in checks.values():
            check.rows.sort(key=lambda row: row.category)
        notes = []
        if totals.completions_without_stop:
            notes.append(
                f"{totals.completions_without_stop} of {totals.completions} completions contain no stop token "
                "(the whole generated text was taken as sampled)"
            )
        if totals.final_steps:
            notes.append(
                f"{totals.final_steps} conversations end with messages after their last assistant turn: that final "
                "appended step is audited against the next prompt render(M, gp=True)"
            )
        if allowed is not None and self.options.generates:
            notes.append(
                f"the generation prompt {_STATE_WORDS.get(self.reasoning.state, 'limits')} the reasoning block: "
                f"generated assistant turns carry reasoning only as a model can produce it there: {', '.join(allowed)} "
                "(other kinds of the grid take the nearest of these)"
            )
        checks["rollout"].notes.extend(notes)
        checks["mask"].notes.extend(mask_notes(self.model))
        if self.model.text_level_only:
            checks["roundtrip"].notes.append("not applicable: text-level audit (no vocabulary)")
            checks["rollout"].notes.append("text stability only: seam and drift need the real vocabulary")


def keep_walked(failures: Sequence[Failure], realized: RealizedConversation) -> None:
    """Keep on each failure what its explanation reads (:class:`~tito_audit.audit.results.Walked`): the conversation as
    audited, shared by all its failures (no copy: the failures kept after the audit bound what stays in memory), and
    for a rollout step, what the model wrote in the turn before it where history does not render that turn."""
    conversation = realized.conversation
    turns = conversation.assistant_indices()
    for failure in failures:
        model_text = None
        if failure.check == "rollout":
            before = max((j for j in turns if j < failure.turn), default=None)
            alignment = realized.alignments.get(before) if before is not None else None
            model_text = alignment.model_text if alignment is not None else None
        failure.walked = Walked(conversation, model_text)
