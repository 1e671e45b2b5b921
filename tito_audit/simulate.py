"""The simulated TITO rollout of one conversation and the four checks on it (SPEC, "The simulated rollout").

For every assistant turn ``j``: ``P = render(M[:j], gp=True)``, ``F = render(M[:j+1], gp=False)``; the
model's text is ``F`` after ``P`` and the sampled completion is its canonical encoding cut after the
first stop token. One token buffer starts at ``ids(M[:j1], gp=True)`` and only grows: completions as
sampled, then the bridge to the next prompt ``R``. At each appended step we test text stability,
seam stability and re-render drift, and compare the bridge with a history-free stand-in.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from tito_audit.causes import TextContext, classify_text_divergence, token_boundary
from tito_audit.conversation import ASSISTANT, TOOL, USER, Conversation, Message, steps_of
from tito_audit.diff import (
    common_prefix_length,
    first_difference,
    mismatched_positions,
    text_window,
    token_window,
)
from tito_audit.realize import (
    GEN_PROMPT_MISMATCH,
    MessageRef,
    TurnAlignment,
    owner_of,
    was_last_in_rollout,
)
from tito_audit.render import PrefixRenderError, RenderedPrefix, Renderer, RenderError
from tito_audit.results import Failure
from tito_audit.tokens import REPLACEMENT_CHAR, TokenCodec

PASSED, FAILED, REFUSED = "passed", "failed", "refused"


@dataclass
class Tally:
    check: str
    category: str
    status: str


@dataclass
class DriftTally:
    steps: int = 0
    canonical: int = 0
    noncanonical: int = 0
    mismatched_tokens: int = 0
    mismatched_tokens_noncanonical: int = 0
    total_tokens: int = 0
    causes: dict[str, int] = field(default_factory=dict)


@dataclass
class Outcome:
    """Everything one conversation contributed to the audit."""

    tallies: list[Tally] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    drift: DriftTally = field(default_factory=DriftTally)
    gen_prompt_mismatches: int = 0
    completions: int = 0
    completions_without_stop: int = 0
    turn_status: dict[int, str] = field(default_factory=dict)
    """How each assistant turn was aligned with its generation prompt (see :mod:`tito_audit.realize`)."""

    def count(self, check: str, category: str, status: str) -> None:
        self.tallies.append(Tally(check, category, status))


@dataclass
class Completion:
    turn: int
    text: str
    """What the engine returns as text: the model's text cut after the first stop token."""
    ids: list[int]
    noncanonical: list[int] | None
    tail: str
    """Text the template writes after the stop token; it belongs to the bridge."""
    stopped: bool
    gen_prompt_mismatch: bool
    mismatch_from: int = 0
    """Where (in the prompt's text) the generation prompt and the rendered turn part ways."""


@dataclass
class Segment:
    kind: str
    turn: int
    start: int
    end: int


class RolloutSimulator:
    """Runs the rollout and the checks for conversations of one model variant."""

    def __init__(
        self, renderer: Renderer, codec: TokenCodec, stop_ids: Sequence[int], seed: int, text_only: bool = False
    ) -> None:
        """``text_only``: the tokenizer is a stand-in (no vocabulary); only text-level results are made."""
        self.text_only = text_only
        self.renderer = renderer
        self.codec = codec
        self.stop_ids = frozenset(stop_ids)
        self.stop_texts = tuple(codec.decode([i]) for i in sorted(self.stop_ids))
        self.seed = seed
        self._decode_one = lambda token_id: codec.decode([token_id])

    # -- entry point ----------------------------------------------------------------------------
    def run(
        self,
        conversation: Conversation,
        renders: dict[tuple[int, bool], RenderedPrefix],
        alignments: dict[int, TurnAlignment],
    ) -> Outcome:
        """The checks on one accepted conversation whose assistant turns were aligned by
        :func:`tito_audit.realize.realize` (``renders`` holds its turn renders)."""
        outcome = Outcome()
        context = TextContext(
            conversation.messages,
            self.codec.written_controls,
            self.stop_texts,
            self.codec.written_control_pattern,
        )
        self._append_check(conversation, renders, outcome, context)
        self._rollout(conversation, renders, alignments, outcome, context)
        if not self.text_only:
            self._literal_specials(conversation, outcome)
        return outcome

    # -- check 2: append --------------------------------------------------------------------------
    def _append_check(
        self,
        conversation: Conversation,
        renders: dict[tuple[int, bool], RenderedPrefix],
        outcome: Outcome,
        context: TextContext,
    ) -> None:
        messages = conversation.messages
        missing = [(k, False) for k in range(1, len(messages) + 1) if (k, False) not in renders]
        # usually every prefix renders: one batch (one tokenizer call); otherwise prefix by prefix below
        with contextlib.suppress(RenderError):
            renders.update(self.renderer.prefixes(messages, conversation.tools, missing))
        for k in range(1, len(messages)):
            role = str(messages[k].get("role"))
            category = f"{role} after {messages[k - 1].get('role')}"
            try:
                extra = self.renderer.prefixes(
                    messages,
                    conversation.tools,
                    [key for key in ((k, False), (k + 1, False)) if key not in renders],
                )
            except RenderError:
                outcome.count("append", category, REFUSED)
                continue
            renders.update(extra)
            before, after = renders[(k, False)], renders[(k + 1, False)]
            roles = [str(messages[k - 1].get("role")), role]
            char_diff = first_difference(before.text, after.text)
            token_diff = None if self.text_only else first_difference(before.ids, after.ids)
            if char_diff is None and token_diff is None:
                outcome.count("append", category, PASSED)
                continue
            outcome.count("append", category, FAILED)
            owner = None
            if char_diff is not None:
                owner = owner_of(
                    before.text,
                    char_diff,
                    lambda n: renders[(n, False)].text if (n, False) in renders else None,
                    k,
                    lambda m, last=k - 1: m == last,
                    messages,
                    after.text,
                )
                causes = classify_text_divergence(before.text, after.text, char_diff, context, owner=owner)
                aspect = "text"
            else:
                causes, aspect = ["bpe-seam"], "tokens"
            token_index = token_diff if token_diff is not None else common_prefix_length(before.ids, after.ids)
            outcome.failures.append(
                self._failure(
                    "append",
                    aspect,
                    category,
                    conversation,
                    k,
                    roles,
                    causes,
                    before,
                    after,
                    char_diff,
                    token_index,
                    owner,
                )
            )

    # -- check 3: rollout (and 1: roundtrip of completions, 4: bridge) ---------------------------
    def _completion(
        self, j: int, renders: dict[tuple[int, bool], RenderedPrefix], alignment: TurnAlignment, rng: random.Random
    ) -> Completion:
        full = renders[(j + 1, False)].text
        mismatch = alignment.status == GEN_PROMPT_MISMATCH
        start = alignment.completion_start
        if mismatch:  # the model's text begins where the two renders part, at a whole control token
            start = token_boundary(full, start, self.codec.written_added_pattern)
        generated = full[start:]
        ids = self.codec.encode(generated)
        cut = next((n + 1 for n, token_id in enumerate(ids) if token_id in self.stop_ids), None)
        sampled = ids[:cut] if cut is not None else ids
        end = len(generated)
        if cut is not None:
            stop_text = self.codec.decode([sampled[-1]])
            position = generated.find(stop_text)
            end = position + len(stop_text) if position >= 0 else len(generated)
        return Completion(
            turn=j,
            text=generated[:end],
            ids=sampled,
            noncanonical=self.codec.noncanonical(sampled, rng),
            tail=generated[end:],
            stopped=cut is not None,
            gen_prompt_mismatch=mismatch,
            mismatch_from=start if mismatch else 0,
        )

    def _rollout(
        self,
        conversation: Conversation,
        renders: dict[tuple[int, bool], RenderedPrefix],
        alignments: dict[int, TurnAlignment],
        outcome: Outcome,
        context: TextContext,
    ) -> None:
        messages = conversation.messages
        turns = conversation.assistant_indices()
        if not turns:
            return
        rng = random.Random(f"noncanonical:{self.seed}:{conversation.id}")
        steps = {step.after: step for step in steps_of(messages)}
        first = renders[(turns[0], True)]
        buffer, buffer_nc, buffer_text = list(first.ids), list(first.ids), first.text
        segments = [Segment("prompt", turns[0], 0, len(buffer))]

        previous: Completion | None = None
        for j in turns:
            if previous is not None:
                step = steps[j]
                prompt = renders[(j, True)]
                synced = self._step(
                    conversation,
                    step.kind,
                    list(step.roles),
                    j,
                    buffer,
                    buffer_nc,
                    buffer_text,
                    prompt,
                    renders,
                    outcome,
                    context,
                    segments,
                    previous,
                )
                if synced is None:  # the buffer cannot follow: start again from the template's prompt
                    buffer, buffer_nc, buffer_text = list(prompt.ids), list(prompt.ids), prompt.text
                    segments.append(Segment("resync", j, 0, len(buffer)))
                else:
                    segments.append(Segment("bridge", j, len(buffer), len(buffer) + len(synced)))
                    buffer += synced
                    buffer_nc += synced
                    buffer_text = prompt.text
            completion = self._completion(j, renders, alignments[j], rng)
            outcome.turn_status[j] = alignments[j].status
            if not self.text_only:
                self._roundtrip(conversation, completion, outcome)
            outcome.completions += 1
            outcome.gen_prompt_mismatches += completion.gen_prompt_mismatch
            outcome.completions_without_stop += not completion.stopped
            previous = completion
            segments.append(Segment("completion", j, len(buffer), len(buffer) + len(completion.ids)))
            buffer += completion.ids
            buffer_nc += completion.noncanonical or completion.ids
            buffer_text += completion.text

        if self.text_only:
            return
        self._whole_buffer(conversation, buffer, buffer_text, outcome)
        final = renders.get((len(messages), False))
        if final is not None and previous is not None and turns[-1] == len(messages) - 1:
            reference = list(final.ids)
            tail_ids = self.codec.encode(previous.tail) if previous.tail else []
            if tail_ids and reference[-len(tail_ids) :] == tail_ids:
                reference = reference[: -len(tail_ids)]  # never sampled, never trained on
            outcome.drift.total_tokens += len(reference)
            outcome.drift.mismatched_tokens += mismatched_positions(buffer, reference)
            outcome.drift.mismatched_tokens_noncanonical += mismatched_positions(buffer_nc, reference)

    def _step(
        self,
        conversation: Conversation,
        kind: str,
        roles: list[str],
        j: int,
        buffer: list[int],
        buffer_nc: list[int],
        buffer_text: str,
        prompt: RenderedPrefix,
        renders: dict[tuple[int, bool], RenderedPrefix],
        outcome: Outcome,
        context: TextContext,
        segments: list[Segment],
        previous: Completion,
    ) -> list[int] | None:
        """Check the step before turn ``j``; return the bridge ids when the buffer can follow, else None."""
        normalized_buffer, normalized_prompt = (
            self.codec.normalize(buffer_text),
            self.codec.normalize(prompt.text),
        )
        text_index = first_difference(normalized_buffer, normalized_prompt)
        if text_index is not None:
            outcome.count("rollout", kind, FAILED)
            messages = conversation.messages
            owner = owner_of(
                normalized_buffer,
                text_index,
                lambda n: self.codec.normalize(renders[(n, False)].text) if (n, False) in renders else None,
                j,
                lambda m: was_last_in_rollout(messages, m),
                messages,
                normalized_prompt,
            )
            # where the raw texts part (the normalizer may change lengths; mismatch_from is a raw index)
            raw_index = first_difference(buffer_text, prompt.text)
            at_prompt = (
                owner is None
                and previous.gen_prompt_mismatch
                and (raw_index if raw_index is not None else text_index) >= previous.mismatch_from
            )
            known = ["gen-prompt-mismatch"] if at_prompt else []
            causes = classify_text_divergence(
                normalized_buffer, normalized_prompt, text_index, context, known, owner=owner
            )
            token_index = first_difference(buffer, prompt.ids)
            outcome.failures.append(
                self._failure(
                    "rollout",
                    "text",
                    kind,
                    conversation,
                    j,
                    roles,
                    causes,
                    RenderedPrefix(normalized_buffer, buffer),
                    RenderedPrefix(normalized_prompt, prompt.ids),
                    text_index,
                    token_index if token_index is not None else len(buffer),
                    owner,
                )
            )
            return None
        # Backends that tokenize message by message (mistral-common) have no single-string encoding:
        # their canonical buffer is the pieces they produced, which is the buffer itself.
        canonical = list(buffer) if self.codec.piecewise or self.text_only else self.codec.encode(buffer_text)
        seam_index = None if self.text_only else first_difference(canonical, prompt.ids)
        if seam_index is not None:
            outcome.count("rollout", kind, FAILED)
            outcome.failures.append(
                self._token_failure(
                    "rollout",
                    "seam",
                    kind,
                    conversation,
                    j,
                    roles,
                    ["bpe-seam"],
                    canonical,
                    prompt.ids,
                    seam_index,
                )
            )
            return None
        outcome.count("rollout", kind, PASSED)
        if not self.text_only:
            self._drift(conversation, kind, j, roles, buffer, buffer_nc, prompt, segments, outcome)
        bridge = list(prompt.ids[len(canonical) :])
        if kind == TOOL:
            self._bridge_check(conversation, j, roles, bridge, outcome)
        return bridge

    def _drift(
        self,
        conversation: Conversation,
        kind: str,
        j: int,
        roles: list[str],
        buffer: list[int],
        buffer_nc: list[int],
        prompt: RenderedPrefix,
        segments: list[Segment],
        outcome: Outcome,
    ) -> None:
        """Re-render drift on a step the buffer can follow: is the buffer, as sampled, a prefix of ids(R)?"""
        drift = outcome.drift
        drift.steps += 1
        for aspect, candidate in (("drift", buffer), ("drift-noncanonical", buffer_nc)):
            index = first_difference(candidate, prompt.ids)
            if index is None:
                continue
            if aspect == "drift":
                drift.canonical += 1
                cause = self._drift_cause(index, segments, candidate, prompt.ids)
            else:
                drift.noncanonical += 1
                cause = "noncanonical-split"
            drift.causes[cause] = drift.causes.get(cause, 0) + 1
            if aspect == "drift" or candidate != buffer:
                outcome.failures.append(
                    self._token_failure(
                        "rollout", aspect, kind, conversation, j, roles, [cause], candidate, prompt.ids, index
                    )
                )

    def _drift_cause(self, index: int, segments: list[Segment], buffer: list[int], reference: Sequence[int]) -> str:
        for segment in segments:
            if segment.kind == "completion" and segment.start <= index < segment.end:
                decoded = self.codec.decode(buffer[segment.start : segment.end])
                if REPLACEMENT_CHAR in decoded:
                    return "utf8-split"
                return "bpe-seam"
        return "bpe-seam" if index > 0 else "bos-duplication" if buffer[:1] != list(reference[:1]) else "bpe-seam"

    # -- check 4: bridge ----------------------------------------------------------------------------
    def _stand_in(self, conversation: Conversation, j: int) -> tuple[list[Message], list[Message]]:
        """A short history-free conversation (a user message and an assistant tool call) plus the step's messages."""
        start = max(i for i in conversation.assistant_indices() if i < j)
        step_messages = conversation.messages[start + 1 : j]
        calls = [
            {
                "id": m.get("tool_call_id", "call00000"),
                "type": "function",
                "function": {"name": m.get("name", "tool"), "arguments": {}},
            }
            for m in step_messages
        ]
        head = [
            {"role": USER, "content": "Use the tools."},
            {"role": ASSISTANT, "content": "", "tool_calls": calls},
        ]
        return head, step_messages

    def _stand_in_buffer(self, head: list[Message], tools: list[dict] | None) -> str:
        """The stand-in's buffer text: its prompt and its sampled tool call, cut after the stop token."""
        renders = self.renderer.prefixes(head, tools, [(1, True), (2, False)])
        prompt, full = renders[(1, True)], renders[(2, False)]
        generated = full.text[common_prefix_length(prompt.text, full.text) :]
        ids = self.codec.encode(generated)
        cut = next((n + 1 for n, t in enumerate(ids) if t in self.stop_ids), len(ids))
        return prompt.text + self.codec.decode(ids[:cut])

    def _bridge_check(
        self, conversation: Conversation, j: int, roles: list[str], bridge: list[int], outcome: Outcome
    ) -> None:
        head, step_messages = self._stand_in(conversation, j)
        try:
            stand_in_text = self._stand_in_buffer(head, conversation.tools)
            after = self.renderer.prefixes(
                [*head, *step_messages], conversation.tools, [(len(head) + len(step_messages), True)]
            )[(len(head) + len(step_messages), True)]
        except RenderError:
            outcome.count("bridge", TOOL, REFUSED)
            return
        detail = "expected: the real bridge; actual: the stand-in suffix"
        if not after.text.startswith(stand_in_text):
            # The stand-in is not prefix-stable itself: a trainer taking its suffix gets these tokens.
            stand_in_bridge = self.codec.encode(after.text[common_prefix_length(stand_in_text, after.text) :])
            detail += " (the stand-in's own assistant turn renders differently once tool results follow)"
        else:
            stand_in_bridge = list(after.ids[len(self.codec.encode(stand_in_text)) :])
        index = first_difference(stand_in_bridge, bridge)
        if index is None and len(stand_in_bridge) == len(bridge):
            outcome.count("bridge", TOOL, PASSED)
            return
        outcome.count("bridge", TOOL, FAILED)
        index = index if index is not None else len(stand_in_bridge)
        outcome.failures.append(
            self._token_failure(
                "bridge",
                "suffix",
                TOOL,
                conversation,
                j,
                roles,
                ["history-dependent-suffix"],
                bridge,
                stand_in_bridge,
                index,
                detail=detail,
            )
        )

    # -- check 1: roundtrip -------------------------------------------------------------------------
    def _roundtrip(self, conversation: Conversation, completion: Completion, outcome: Outcome) -> None:
        """decode -> re-encode of the sampled completion (canonical and non-canonical), and whether decoding
        gives back the text the model produced (a normalizer changes it)."""
        roles = [ASSISTANT]
        for category, ids in (
            ("completion (canonical)", completion.ids),
            ("completion (non-canonical)", completion.noncanonical),
        ):
            if ids is not None:
                self._reencode(conversation, completion.turn, roles, category, ids, outcome)
        self._decoded_text(
            conversation, completion.turn, roles, "completion text", completion.ids, completion.text, outcome
        )

    def _reencode(
        self, conversation: Conversation, turn: int, roles: list[str], category: str, ids: list[int], outcome: Outcome
    ) -> None:
        decoded = self.codec.decode(ids)
        again = self.codec.encode(decoded)
        if again == ids:
            outcome.count("roundtrip", category, PASSED)
            return
        outcome.count("roundtrip", category, FAILED)
        if REPLACEMENT_CHAR in decoded:
            cause = "utf8-split"
        elif category.endswith("(non-canonical)"):
            cause = "noncanonical-split"
        elif self.codec.decode(again) != decoded:
            cause = "normalization"
        else:
            cause = "bpe-seam"  # tokens that merge differently once decoded together
        index = first_difference(ids, again) or 0
        outcome.failures.append(
            self._token_failure(
                "roundtrip", "reencode", category, conversation, turn, roles, [cause], ids, again, index
            )
        )

    def _decoded_text(
        self,
        conversation: Conversation,
        turn: int,
        roles: list[str],
        category: str,
        ids: list[int],
        text: str,
        outcome: Outcome,
    ) -> None:
        decoded = self.codec.decode(ids)
        if decoded == text:
            outcome.count("roundtrip", category, PASSED)
            return
        outcome.count("roundtrip", category, FAILED)
        index = first_difference(decoded, text) or 0
        plain = self.codec.encode_plain(text)
        outcome.failures.append(
            Failure(
                check="roundtrip",
                aspect="text",
                category=category,
                conversation_id=conversation.id,
                turn=turn,
                roles=roles,
                causes=["utf8-split" if REPLACEMENT_CHAR in decoded else "normalization"],
                char_index=index,
                token_index=first_difference(ids, plain) or 0,
                expected=token_window(plain, first_difference(ids, plain) or 0, self._decode_one),
                actual=token_window(ids, first_difference(ids, plain) or 0, self._decode_one),
                expected_text=text_window(text, index),
                actual_text=text_window(decoded, index),
                detail="expected: the text the template rendered; actual: what decoding the ids gives",
            )
        )

    def _whole_buffer(self, conversation: Conversation, buffer: list[int], text: str, outcome: Outcome) -> None:
        turn, roles = len(conversation.messages) - 1, []
        self._reencode(conversation, turn, roles, "whole buffer", buffer, outcome)
        self._decoded_text(conversation, turn, roles, "whole buffer text", buffer, text, outcome)

    def _literal_specials(self, conversation: Conversation, outcome: Outcome) -> None:
        """Message text holding a control-token string that encodes to the control id (role-injection risk)."""
        controls = self.codec.control_ids_by_text
        for index, message in enumerate(conversation.messages):
            content = message.get("content")
            if message.get("role") not in (USER, TOOL) or not isinstance(content, str):
                continue
            present = [c for c in controls if c in content]
            if not present:
                continue
            ids = self.codec.encode(content)
            hits = [controls[c] for c in present if controls[c] in ids]
            category = f"literal special token in {message.get('role')} text"
            if not hits:
                outcome.count("roundtrip", category, PASSED)
                continue
            outcome.count("roundtrip", category, FAILED)
            position = ids.index(hits[0])
            plain = self.codec.encode_plain(content)
            outcome.failures.append(
                self._token_failure(
                    "roundtrip",
                    "control-token",
                    category,
                    conversation,
                    index,
                    [str(message.get("role"))],
                    ["special-token-literal"],
                    plain,
                    ids,
                    position,
                    detail="expected: the text as plain tokens; actual: how it encodes (a control id)",
                )
            )

    # -- failure records ------------------------------------------------------------------------------
    def _failure(
        self,
        check: str,
        aspect: str,
        category: str,
        conversation: Conversation,
        turn: int,
        roles: list[str],
        causes: list[str],
        before: RenderedPrefix,
        after: RenderedPrefix,
        char_index: int | None,
        token_index: int,
        owner: MessageRef | None = None,
    ) -> Failure:
        return Failure(
            check=check,
            aspect=aspect,
            category=category,
            conversation_id=conversation.id,
            turn=turn,
            roles=roles,
            causes=causes,
            char_index=char_index,
            token_index=token_index,
            expected=token_window(before.ids, token_index, self._decode_one),
            actual=token_window(after.ids, token_index, self._decode_one),
            expected_text=text_window(before.text, char_index) if char_index is not None else "",
            actual_text=text_window(after.text, char_index) if char_index is not None else "",
            message_index=owner.index if owner is not None else None,
            message_role=owner.role if owner is not None else None,
            message_was_last=owner.was_last if owner is not None else None,
        )

    def _token_failure(
        self,
        check: str,
        aspect: str,
        category: str,
        conversation: Conversation,
        turn: int,
        roles: list[str],
        causes: list[str],
        expected: Sequence[int],
        actual: Sequence[int],
        index: int,
        detail: str = "",
    ) -> Failure:
        return Failure(
            check=check,
            aspect=aspect,
            category=category,
            conversation_id=conversation.id,
            turn=turn,
            roles=roles,
            causes=causes,
            token_index=index,
            expected=token_window(expected, index, self._decode_one),
            actual=token_window(actual, index, self._decode_one),
            detail=detail,
        )


def render_failure_reason(error: PrefixRenderError) -> str:
    return f"{error.reason} (rendering messages[:{error.k}], add_generation_prompt={error.gp})"
