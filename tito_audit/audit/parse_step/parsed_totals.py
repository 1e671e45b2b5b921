"""The rollout with a parser, summed over a variant's conversations into a :class:`ParseResult`."""

from __future__ import annotations

from dataclasses import dataclass, field

from tito_audit.audit.aggregate import add_tallies
from tito_audit.audit.checks.outcome import count_into
from tito_audit.audit.conditions.verdict_conditions import conditions_of, tally_steps
from tito_audit.audit.parse_step.parsed_rollout import NAME, ParsedOutcome
from tito_audit.audit.parse_step.value_rewrites import RewriteTotals
from tito_audit.audit.result_conditions import CallTurns
from tito_audit.audit.results import CheckResult, Failure, ParseResult, WrittenLayout
from tito_audit.audit.verdict import WALKED, verdict_for
from tito_audit.parse.parser import CompletionParser, engine_of
from tito_audit.parse.written import LAYOUTS


@dataclass
class ParsedTotals:
    check: CheckResult = field(default_factory=lambda: CheckResult(NAME))
    failures: list[Failure] = field(default_factory=list)
    fields: dict[str, int] = field(default_factory=dict)
    turns_parsed: int = 0
    turns_changed: int = 0
    written: dict[str, list[int]] = field(default_factory=dict)
    skipped: int = 0
    without_tools: int = 0
    turns_in_model_layout: int = 0
    calls_in_reasoning: list[int] = field(default_factory=lambda: [0, 0])
    conditions: dict[tuple, list[int]] = field(default_factory=dict)
    call_turns: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    rewritten: RewriteTotals = field(default_factory=RewriteTotals)

    def add(self, outcome: ParsedOutcome, shape_changes: list[str]) -> None:
        for tally in outcome.tallies:
            count_into(self.check.row(tally.category), tally.status)
        for failure in outcome.failures:
            failure.shape_changes = shape_changes
            for cause in failure.causes:
                self.check.cause_counts[cause] = self.check.cause_counts.get(cause, 0) + 1
        self.failures.extend(outcome.failures)
        for name, count in outcome.fields.items():
            self.fields[name] = self.fields.get(name, 0) + count
        self.skipped += outcome.skipped
        self.without_tools += outcome.without_tools
        self.turns_in_model_layout += outcome.turns_in_model_layout
        self.calls_in_reasoning[0] += outcome.calls_in_reasoning[0]
        self.calls_in_reasoning[1] += outcome.calls_in_reasoning[1]
        add_tallies(self.conditions, outcome.conditions)
        self.rewritten.add(outcome.rewritten)
        self.call_turns = [a + b for a, b in zip(self.call_turns, outcome.call_turns, strict=True)]
        self.turns_parsed += outcome.turns_parsed
        self.turns_changed += outcome.turns_changed
        for layout, (steps, differing) in outcome.written.items():
            counts = self.written.setdefault(layout, [0, 0])
            counts[0] += steps
            counts[1] += differing

    def _calls(self, rare_form: str | None) -> CallTurns:
        turns, lost, rare_turns, rare_lost = self.call_turns
        return CallTurns(turns, lost, rare_form or "", rare_turns, rare_lost)

    def result(
        self,
        parser: CompletionParser,
        native_tool_conversations: int,
        failures: list[Failure],
        rare_form: str | None = None,
    ) -> ParseResult:
        """The variant's result with ``parser``; ``failures`` are the examples kept (see ``keep_examples``)."""
        self.check.rows.sort(key=lambda row: row.category)
        verdict, reason = verdict_for({"rollout": self.check}, native_tool_conversations, WALKED)
        tallies = tally_steps(self.conditions)
        order = [layout.name for layout in LAYOUTS]
        written = [WrittenLayout(name, *self.written[name]) for name in sorted(self.written, key=order.index)]
        return ParseResult(
            parser=parser.name,
            engine=engine_of(parser),
            verdict=verdict,
            verdict_reason=reason,
            check=self.check,
            fields=dict(sorted(self.fields.items())),
            failures=failures,
            turns_parsed=self.turns_parsed,
            turns_changed=self.turns_changed,
            written=written,
            conversations_skipped=self.skipped,
            conversations_without_tools=self.without_tools,
            turns_in_model_layout=self.turns_in_model_layout,
            calls_in_reasoning=self.calls_in_reasoning[0],
            calls_in_reasoning_lost=self.calls_in_reasoning[1],
            calls=self._calls(rare_form),
            conditions=conditions_of(tallies, verdict),
            rewritten_values=self.rewritten.result(),
            rewrite_failures=self.rewritten.failures,
        )
