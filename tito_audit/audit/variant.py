"""One variant's audit: accept (or reshape) each conversation, realize its turns, run the checks, aggregate,
then the findings and the verdict.

The path of one conversation: :class:`~tito_audit.audit.realization.acceptance.Acceptor` (renders or a refusal) →
:func:`~tito_audit.audit.realization.realize.realize` (each assistant turn in a form a model could produce) →
:class:`~tito_audit.audit.checks.rollout_context.RolloutContext` → :func:`~tito_audit.audit.checks.run_checks` →
:class:`~tito_audit.audit.aggregate.VariantTotals`.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Sequence

from tito_audit.audit.aggregate import (
    VariantTotals,
    add_tallies,
    group_refusals,
    group_unrealized,
    keep_examples,
    steps_by_form,
    steps_by_shape,
)
from tito_audit.audit.audit_options import AuditOptions, ConversationSource, ProgressCallback
from tito_audit.audit.checks import run_checks
from tito_audit.audit.checks.mask import variant_notes as mask_notes
from tito_audit.audit.checks.outcome import Outcome
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
from tito_audit.audit.pending_plan import ParseStep, ParseSteps, PendingPlan
from tito_audit.audit.realization.acceptance import Acceptor, Renders
from tito_audit.audit.realization.realize import RealizedConversation, keep_walked, realize, turn_keys
from tito_audit.audit.realization.reasoning_block import VariantReasoning, variant_reasoning
from tito_audit.audit.realization.stops import collect_stop_tokens, model_end_token
from tito_audit.audit.results import StopToken, VariantResult
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
        self.renderer = Renderer(model, codec, variant.kwargs, options.limits, remember=True)
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
        """Audit the conversations ``conversations_for`` gives for the reasoning kinds this variant allows, with the
        parsers given to this audit; ``default``: the steps of the default setting's audit (:attr:`steps`), for a
        variant of another setting."""
        steps = ParseSteps(PendingPlan.known_now(self.parsers), contextlib.nullcontext)
        walk = self.walk(conversations_for, progress, steps, default)
        steps.finish()
        return walk.result()

    def walk(
        self,
        conversations_for: ConversationSource,
        progress: ProgressCallback | None,
        steps: ParseSteps,
        default: StepStatuses | None = None,
    ) -> VariantWalk:
        """Walk the conversations ``conversations_for`` gives: accept, realize and check each; hand each one's parse
        step (every parser, the undo re-runs that settle the template's steps and each parser's, the written values)
        to ``steps``, which runs it once the parsers are known (see :mod:`tito_audit.audit.pending_plan`);
        ``default`` as in :meth:`run`."""
        options, model = self.options, self.model
        walk = VariantWalk(self, default)
        totals = walk.totals
        with frozen_clock(model.template_source, options.clock):
            walk.allowed = self.reasoning.kinds
            conversations = conversations_for(self.profile)
            walk.conversations = len(conversations)
            walk.stop_tokens, setup = self.check_setup()
            for number, conversation in enumerate(conversations, start=1):
                audited, renders, refusal = self.accept(conversation)
                if refusal is not None:
                    totals.refusals.append(refusal)
                if audited is None or renders is None:
                    totals.add_refused(conversation)
                else:
                    changes = list(refusal.accepted_after or ()) if refusal is not None else []
                    if audited.has_tool_traffic() and not set(changes) & NOT_NATIVE_TOOLS:
                        walk.native_tool_conversations += 1
                    realized = self.realize(audited, renders)
                    totals.unrealized += realized.unrealized
                    context = RolloutContext(setup, realized.conversation, realized.renders, realized.alignments)
                    outcome = run_checks(context)
                    keep_walked(outcome.failures, realized)
                    totals.add(outcome, changes)  # its steps' conditions once its parse step has settled them
                    totals.add_shapes(realized.conversation, outcome)
                    failing = {key[1]: f.causes for key, f in outcome.located if key[0] == 1 and key[2:] == (0, 0)}
                    steps.add(walk.parse_step(setup, context, outcome, failing, changes))
                    last = (len(realized.conversation.messages), False)
                    walk.accepted.append((realized.conversation, realized.renders[last].text))
                if progress is not None:
                    progress(self.variant.name, number, len(conversations))
            walk.findings = run_findings(
                FindingContext(
                    model,
                    self.codec,
                    self.renderer,
                    options.clock,
                    walk.accepted,
                    totals.completions,
                    totals.gen_prompt_mismatches,
                )
            )
        return walk

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


class VariantWalk:
    """One variant's conversations walked (:meth:`VariantAudit.walk`): the template's checks of each, and their parse
    steps as they run; :meth:`result` sums them into the variant's result (its parse steps run)."""

    def __init__(self, audit: VariantAudit, default: StepStatuses | None = None) -> None:
        """``default``: the steps of the default setting's audit, for a variant of another setting (see
        :meth:`VariantAudit.run`)."""
        self.audit = audit
        self.default = default
        cap = TRIED_CONVERSATIONS if default is None else TRIED_OTHER_SETTINGS
        self.budgets: dict[str, Budget] = defaultdict(lambda: Budget(cap))
        """Per rollout (``template`` or a parser's name): what it walked again so far."""
        self.totals = VariantTotals()
        self.accepted: list[tuple[Conversation, str]] = []
        self.native_tool_conversations = 0
        self.conversations = 0
        self.allowed: tuple[str, ...] | None = None
        self.stop_tokens: list[StopToken] = []
        self.findings: list = []
        self.parsers: list[CompletionParser] | None = None
        """None until the first parse step ran (a variant with no conversation audited runs none)."""
        self.parsed: list[ParsedTotals] = []
        self.values = ValueTotals()
        self._literals = LiteralCache()

    def parse_step(
        self,
        setup: CheckSetup,
        context: RolloutContext,
        outcome: Outcome,
        failing: dict[int, list[str]],
        changes: list[str],
    ) -> ParseStep:
        """The parse step of a walked conversation: each parser's rollout (``failing``: the causes of each step that
        fails without a parser); the undo re-runs that settle the failing steps of the template's rollout
        (``outcome``, whose conditions are counted then) and of each parser's, cut after the last step any of them
        fails; then the written values."""

        def step(parsers: list[CompletionParser]) -> None:
            if self.parsers is None:
                self.parsers = list(parsers)
                self.parsed = [ParsedTotals() for _ in self.parsers]
            audit = self.audit
            seed, layout, conversation = audit.options.seed, audit.layout, context.conversation.id
            memos = [ParseMemo(parser) for parser in self.parsers]
            walked = [parsed_rollout(context, failing, memo, seed, layout) for memo in memos]
            until = last_failing(outcome.walked, *(found.walked for found in walked))
            undos = ConversationUndos(context.conversation, turn_forms(context), until)
            context_of = audit._walked_again(setup, context)
            settle(outcome.walked, undos, simulated_walk(context_of), self.budgets[TEMPLATE])
            audit._by_setting(TEMPLATE, conversation, outcome.walked, self.default)
            outcome.count_conditions()
            add_tallies(self.totals.conditions, outcome.conditions)
            for memo, totals_parsed, outcome_parsed in zip(memos, self.parsed, walked, strict=True):
                parser = memo.parser
                walk = parsed_walk(context_of, memo, seed, layout)
                held = settle_parsed(outcome_parsed, undos, walk, self.budgets[parser.name])
                audit._by_setting(parser.name, conversation, outcome_parsed.walked, self.default)
                outcome_parsed.close(held)
                totals_parsed.add(outcome_parsed, changes)
            values_parser = self.parsers[0] if self.parsers else None
            self.values.add(written_values(context, values_parser, seed, self._literals, layout))

        return step

    def result(self) -> VariantResult:
        """The variant's result (every conversation's parse step done: call :meth:`parse_kept` first)."""
        audit, totals, options = self.audit, self.totals, self.audit.options
        parsers = self.parsers or []
        values_parser = parsers[0] if parsers else None
        verdict, reason = verdict_for(totals.checks, self.native_tool_conversations)
        tallies = tally_steps(totals.conditions)
        forms = steps_by_form(totals.forms)
        audit._notes(totals, self.allowed)
        return VariantResult(
            name=audit.variant.name,
            kwargs=dict(audit.variant.kwargs),
            verdict=verdict,
            verdict_reason=reason,
            checks=totals.checks,
            failures=keep_examples(totals.failures, options.max_examples_per_group),
            refused=group_refusals(totals.refusals),
            drift=totals.drift,
            stop_tokens=self.stop_tokens,
            findings=self.findings,
            conversations=self.conversations,
            conversations_audited=len(self.accepted),
            unrealizable=group_unrealized(totals.unrealized),
            steps_by_form=forms,
            steps_by_shape=steps_by_shape(totals.shapes),
            assistant_turns=totals.completions,
            parses=[
                totals_parsed.result(
                    parser,
                    self.native_tool_conversations,
                    keep_examples(totals_parsed.failures, options.max_examples_per_group),
                    audit.rare_form,
                )
                for parser, totals_parsed in zip(parsers, self.parsed, strict=True)
            ],
            values=self.values.result(),
            values_parser=values_parser.name if values_parser is not None else TEMPLATE,
            value_failures=self.values.failures,
            conditions=conditions_of(tallies, verdict),
        )
