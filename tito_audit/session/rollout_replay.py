"""Replay of saved rollouts: were the tokens a trainer used the tokens the model sampled?

Each record holds the conversation and, per assistant turn, the prompt ids the engine was given and the
completion ids it sampled. Three questions per record:

1. **TITO consistency**: is each turn's prompt the previous prompt plus the previous completion plus a
   bridge (only appended)? If not, where is the first differing token?
2. **Completion roundtrip**: do the sampled ids survive decode -> re-encode?
3. **Re-rendering**: what would a trainer that re-renders the conversation get instead of the sampled
   buffer (first divergence, positions that differ), and does each prompt agree with the template?

A saved prompt that is neither the TITO session's (the buffer and the template's bridge) nor the template's own
render of the record's messages belongs to another conversation (another user message, other tools, another
template setting or date): a ``foreign-prompt`` issue, and the record is not consistent whatever its appends.

Field names (the first one present wins; docs/audit.md, "Replay"): turns under ``turns``/``steps``/``rollout``;
prompt ids ``prompt_ids``/``prompt_token_ids``/``input_ids``/``prompt_tokens``; completion ids
``completion_ids``/``completion_token_ids``/``output_ids``/``output_token_ids``/``response_ids``/
``response_token_ids``; or top-level lists of lists under those same names.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.audit.public import (
    TokenWindow,
    common_prefix_length,
    first_difference,
    mismatched_positions,
    token_window,
)
from tito_audit.conversations.conversation import ASSISTANT
from tito_audit.conversations.datasources import SkipRecord, adapt_messages, parse_jsonl, read_text
from tito_audit.conversations.validate import text_problem
from tito_audit.errors import BadInputError
from tito_audit.model.token_ids import token_ids
from tito_audit.model.tokens import TokenCodec
from tito_audit.session import SessionBreak, TitoBreak, TitoSession

TURN_KEYS = ("turns", "steps", "rollout")
FOREIGN = "foreign-prompt"
PROMPT_KEYS = ("prompt_ids", "prompt_token_ids", "input_ids", "prompt_tokens")
COMPLETION_KEYS = (
    "completion_ids",
    "completion_token_ids",
    "output_ids",
    "output_token_ids",
    "response_ids",
    "response_token_ids",
)


@dataclass
class TurnIssue:
    record: int
    turn: int
    kind: str
    """``not-appended`` (TITO), ``roundtrip``, ``template-prompt`` (the prompt is the template's render of the
    record's messages, not the TITO session's), ``foreign-prompt`` (the prompt is neither: not the render of the
    record's own messages), ``template-break``."""
    token_index: int
    expected: TokenWindow | None = None
    actual: TokenWindow | None = None
    detail: str = ""


@dataclass
class RecordResult:
    record: int
    turns: int
    consistent: bool
    bridges: list[int] = field(default_factory=list)
    """Tokens appended between each completion and the next prompt."""
    own_prompts: bool = True
    """Whether every saved prompt is the render of the record's own messages (no ``foreign-prompt``)."""
    rerender_first_divergence: int | None = None
    rerender_mismatched: int = 0
    rerender_total: int = 0


@dataclass
class ReplayReport:
    model_id: str
    source: str
    records: int
    skipped: dict[str, int]
    turns: int
    consistent_records: int
    issues: list[TurnIssue]
    results: list[RecordResult]

    @property
    def consistent(self) -> bool:
        return all(r.consistent for r in self.results)


def _first(record: dict, keys: tuple[str, ...]) -> Any:
    return next((record[k] for k in keys if k in record), None)


def _ids(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise SkipRecord(f"{what} is not a list of token ids")
    return list(value)


def _check_vocabulary(pairs: list[tuple[list[int], list[int]]], id_limit: int, where: str) -> None:
    """An id the tokenizer does not have is bad input naming the record, the turn and the position (decoding it
    would fail deep inside the tokenizer, or silently give nothing)."""
    for turn, (prompt, completion) in enumerate(pairs):
        for name, ids in (("prompt ids", prompt), ("completion ids", completion)):
            token_ids(ids, f"{where}, turn {turn}: {name}", id_limit)


def turns_of(record: dict) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) per turn, from any of the accepted layouts."""
    turns = _first(record, TURN_KEYS)
    if isinstance(turns, list):
        pairs = []
        for turn in turns:
            if not isinstance(turn, dict):
                raise SkipRecord("a turn is not an object")
            pairs.append((_ids(_first(turn, PROMPT_KEYS), "prompt"), _ids(_first(turn, COMPLETION_KEYS), "completion")))
        return pairs
    prompts, completions = _first(record, PROMPT_KEYS), _first(record, COMPLETION_KEYS)
    if isinstance(prompts, list) and prompts and isinstance(prompts[0], list):
        if not isinstance(completions, list) or len(completions) != len(prompts):
            raise SkipRecord("prompt and completion lists differ in length")
        return [(_ids(p, "prompt"), _ids(c, "completion")) for p, c in zip(prompts, completions, strict=True)]
    raise SkipRecord("no per-turn prompt and completion ids (see docs/audit.md, 'Replay of saved rollouts')")


ROLLOUTS = "ROLLOUTS"
"""How replay's errors name the file of saved rollouts (its positional argument)."""


def read_records(path: Path) -> list[Any]:
    records = parse_jsonl(path, read_text(path, ROLLOUTS))
    if not records:
        raise BadInputError(f"{ROLLOUTS} {path}: no records")
    return records


def replay(records: list[Any], guard: TitoSession, model_id: str, source: str) -> ReplayReport:
    """Replay each record through a :class:`~tito_audit.session.TitoSession` spawned from ``guard``: the prompts
    the session gives are what a TITO loop with this template gives, and its breaks are what the guard raises
    in a training loop (the session runs with ``on_break="rerender"`` so that every break is seen)."""
    issues: list[TurnIssue] = []
    results: list[RecordResult] = []
    skipped: dict[str, int] = {}
    total_turns = 0
    codec = guard.codec
    for index, record in enumerate(records):
        try:
            if not isinstance(record, dict):
                raise SkipRecord("record is not an object")
            pairs = turns_of(record)
            messages = adapt_messages(record.get("messages") or [])
            tools = record.get("tools") if isinstance(record.get("tools"), list) else None
            problem = text_problem(messages, tools)
            if problem is not None:
                raise SkipRecord(problem)
        except SkipRecord as reason:
            skipped[str(reason)] = skipped.get(str(reason), 0) + 1
            continue
        _check_vocabulary(pairs, codec.id_limit, f"{ROLLOUTS} {source}: record {index}")
        try:
            result = _replayed(guard, index, messages, tools, pairs, issues)
        except BadInputError as exc:  # what the session refuses of the record: named by the file and record
            raise BadInputError(f"{ROLLOUTS} {source}: record {index}: {exc}") from None
        total_turns += len(pairs)
        results.append(result)
    return ReplayReport(
        model_id=model_id,
        source=source,
        records=len(records),
        skipped=skipped,
        turns=total_turns,
        consistent_records=sum(r.consistent for r in results),
        issues=issues,
        results=results,
    )


def _replayed(
    guard: TitoSession,
    index: int,
    messages: list[dict],
    tools: list[dict] | None,
    pairs: list[tuple[list[int], list[int]]],
    issues: list[TurnIssue],
) -> RecordResult:
    """One record replayed (its issues added to ``issues``): its appends, its completions' roundtrip, its walk with a
    session, what a re-rendering trainer would get."""
    codec = guard.codec
    result = RecordResult(record=index, turns=len(pairs), consistent=True)
    for turn, (prompt, completion) in enumerate(pairs):
        again = codec.encode(codec.decode(completion))
        if again != completion:
            detail = "completion ids do not survive decode -> encode"
            issues.append(_token_issue(codec, index, turn, "roundtrip", completion, again, detail))
        if turn == 0:
            continue
        previous = pairs[turn - 1][0] + pairs[turn - 1][1]
        if first_difference(previous, prompt) is None:
            result.bridges.append(len(prompt) - len(previous))
            continue
        result.consistent = False
        detail = "expected: previous prompt + completion; actual: this turn's prompt"
        issues.append(_token_issue(codec, index, turn, "not-appended", previous, prompt, detail))
    followed = list(_follow(guard, index, messages, tools, pairs))
    issues += followed
    if any(issue.kind == FOREIGN for issue in followed):
        result.own_prompts = result.consistent = False
    if pairs and messages:
        try:
            full = guard.spawn(tools=tools).template_ids(messages, add_generation_prompt=False)
        except TitoBreak:
            full = None
        if full is not None:
            buffer = pairs[-1][0] + pairs[-1][1]
            reference = full[: len(buffer)] if len(full) > len(buffer) else full
            result.rerender_first_divergence = first_difference(buffer, full)
            result.rerender_mismatched = mismatched_positions(buffer, reference)
            result.rerender_total = len(buffer)
    return result


def _token_issue(
    codec: TokenCodec, record: int, turn: int, kind: str, expected: Sequence[int], actual: Sequence[int], detail: str
) -> TurnIssue:
    """An issue located at the first token where ``expected`` and ``actual`` differ, with both windows."""
    at = common_prefix_length(expected, actual)

    def decode_one(token_id: int) -> str:
        return codec.decode([token_id])

    return TurnIssue(
        record, turn, kind, at, token_window(expected, at, decode_one), token_window(actual, at, decode_one), detail
    )


def _follow(
    guard: TitoSession,
    record: int,
    messages: list[dict],
    tools: list[dict] | None,
    pairs: list[tuple[list[int], list[int]]],
) -> Iterator[TurnIssue]:
    """Walk the record with a session: ``template-break`` where the guard breaks (its cause, message and windows),
    ``template-prompt`` where the saved prompt is not the session's (prompt + sampled + verified bridge)."""
    assistants = [j for j, m in enumerate(messages) if m.get("role") == ASSISTANT]
    if not assistants or assistants[0] == 0:
        return
    session = guard.spawn(tools=tools, on_break="rerender", bridge="template")  # each break at its own turn
    try:
        expected: Sequence[int] = session.start(messages[: assistants[0]])
        for turn, (prompt, _) in enumerate(pairs):
            broke = None
            if turn > 0:
                before = assistants[turn - 1]
                j = assistants[turn] if turn < len(assistants) else None
                if j is None or j == before + 1:
                    return  # no assistant message for this turn, or nothing appended between two turns
                expected = session.extend(pairs[turn - 1][1], messages[before], messages[before + 1 : j])
                broke = session.turns[-1].broke
            if broke is not None:
                yield _break_issue(record, turn, broke)
            elif expected != prompt:
                own = session.template_ids(messages[: assistants[turn]], add_generation_prompt=True)
                if prompt == own:
                    detail = "expected: the TITO session's prompt; actual: the saved prompt (the template's render)"
                    yield _token_issue(guard.codec, record, turn, "template-prompt", expected, prompt, detail)
                else:
                    detail = (
                        "expected: the render of the record's own messages; actual: the saved prompt, which is not "
                        "(another conversation, other tools, another template setting or date)"
                    )
                    yield _token_issue(guard.codec, record, turn, FOREIGN, own, prompt, detail)
        last = len(pairs) - 1
        if 0 <= last == len(assistants) - 1 and assistants[last] < len(messages) - 1:
            # messages after the last sampled turn (a rollout cut after tool results): the final appended step
            j = assistants[last]
            session.extend(pairs[last][1], messages[j], messages[j + 1 :])
            broke = session.turns[-1].broke
            if broke is not None:
                yield _break_issue(record, len(pairs), broke)
    except TitoBreak as refusal:  # the template refused to render: step n is turn n (start() is step 0)
        yield _break_issue(record, refusal.details.step, refusal.details)


def _break_issue(record: int, turn: int, details: SessionBreak) -> TurnIssue:
    return TurnIssue(
        record=record,
        turn=turn,
        kind="template-break",
        token_index=details.token_index or 0,
        expected=details.buffer_tokens,
        actual=details.template_tokens,
        detail=f"{', '.join(details.causes)}: " + details.describe().splitlines()[0],
    )
