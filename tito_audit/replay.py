"""Replay of saved rollouts: were the tokens a trainer used the tokens the model sampled?

Each record holds the conversation and, per assistant turn, the prompt ids the engine was given and the
completion ids it sampled. Three questions per record:

1. **TITO consistency**: is each turn's prompt the previous prompt plus the previous completion plus a
   bridge (only appended)? If not, where is the first differing token?
2. **Completion roundtrip**: do the sampled ids survive decode -> re-encode?
3. **Re-rendering**: what would a trainer that re-renders the conversation get instead of the sampled
   buffer (first divergence, positions that differ), and does each prompt agree with the template?

Field names (the first one present wins; see README "Replay"): turns under ``turns``/``steps``/``rollout``;
prompt ids ``prompt_ids``/``prompt_token_ids``/``input_ids``/``prompt_tokens``; completion ids
``completion_ids``/``completion_token_ids``/``output_ids``/``output_token_ids``/``response_ids``/
``response_token_ids``; or top-level lists of lists under those same names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.conversation import ASSISTANT
from tito_audit.datasources import SkipRecord, adapt_messages
from tito_audit.diff import first_difference, mismatched_positions, token_window
from tito_audit.errors import BadInputError
from tito_audit.render import PrefixRenderError, Renderer
from tito_audit.results import TokenWindow
from tito_audit.tokens import TokenCodec

TURN_KEYS = ("turns", "steps", "rollout")
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
    """``not-appended`` (TITO), ``roundtrip``, ``template-prompt`` (prompt differs from the template's)."""
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
    raise SkipRecord("no per-turn prompt and completion ids (see README, 'Replay')")


def read_records(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise BadInputError(f"{path}: {exc.strerror or exc}") from exc
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError as exc:
                raise BadInputError(f"{path}: line {number} is not valid JSON ({exc})") from exc
    if not records:
        raise BadInputError(f"{path}: no records")
    return records


def replay(records: list[Any], renderer: Renderer, codec: TokenCodec, model_id: str, source: str) -> ReplayReport:
    def decode_one(token_id: int) -> str:
        return codec.decode([token_id])

    issues: list[TurnIssue] = []
    results: list[RecordResult] = []
    skipped: dict[str, int] = {}
    total_turns = 0
    for index, record in enumerate(records):
        try:
            if not isinstance(record, dict):
                raise SkipRecord("record is not an object")
            pairs = turns_of(record)
            messages = adapt_messages(record.get("messages") or [])
            tools = record.get("tools") if isinstance(record.get("tools"), list) else None
        except SkipRecord as reason:
            skipped[str(reason)] = skipped.get(str(reason), 0) + 1
            continue
        total_turns += len(pairs)
        result = RecordResult(record=index, turns=len(pairs), consistent=True)
        for turn, (prompt, completion) in enumerate(pairs):
            again = codec.encode(codec.decode(completion))
            if again != completion:
                at = first_difference(completion, again) or 0
                issues.append(
                    TurnIssue(
                        index,
                        turn,
                        "roundtrip",
                        at,
                        token_window(completion, at, decode_one),
                        token_window(again, at, decode_one),
                        "completion ids do not survive decode -> encode",
                    )
                )
            if turn == 0:
                continue
            previous = pairs[turn - 1][0] + pairs[turn - 1][1]
            at = first_difference(previous, prompt)
            if at is None:
                result.bridges.append(len(prompt) - len(previous))
                continue
            result.consistent = False
            issues.append(
                TurnIssue(
                    index,
                    turn,
                    "not-appended",
                    at,
                    token_window(previous, at, decode_one),
                    token_window(prompt, at, decode_one),
                    "expected: previous prompt + completion; actual: this turn's prompt",
                )
            )
        assistants = [j for j, m in enumerate(messages) if m.get("role") == ASSISTANT]
        for turn, j in enumerate(assistants[: len(pairs)]):
            try:
                rendered = renderer.prefixes(messages, tools, [(j, True)])[(j, True)].ids
            except PrefixRenderError:
                break
            at = first_difference(rendered, pairs[turn][0]) if rendered != pairs[turn][0] else None
            if at is not None or len(rendered) != len(pairs[turn][0]):
                at = at if at is not None else min(len(rendered), len(pairs[turn][0]))
                issues.append(
                    TurnIssue(
                        index,
                        turn,
                        "template-prompt",
                        at,
                        token_window(rendered, at, decode_one),
                        token_window(pairs[turn][0], at, decode_one),
                        "expected: the template's prompt; actual: the saved prompt",
                    )
                )
        if pairs and messages:
            try:
                full = renderer.prefixes(messages, tools, [(len(messages), False)])[(len(messages), False)].ids
            except PrefixRenderError:
                full = None
            if full is not None:
                buffer = pairs[-1][0] + pairs[-1][1]
                result.rerender_first_divergence = first_difference(buffer, full)
                result.rerender_mismatched = mismatched_positions(
                    buffer, full[: len(buffer)] if len(full) > len(buffer) else full
                )
                result.rerender_total = len(buffer)
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
