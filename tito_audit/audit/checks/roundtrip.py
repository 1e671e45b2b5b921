"""Check 1, roundtrip (docs/contract.md "The checks"): decoding and re-encoding gives back the ids.

For each sampled completion (canonical, and a non-canonical split of the same bytes) and for whole buffers:
``encode(decode(x)) == x``? Also whether decoding gives back the text the template rendered (a normalizer
changes it), and whether message text holding a literal control-token string encodes to the control id
(role-injection risk). Non-canonical splits always fail on BPE and are labelled so; the other causes
(``normalization``, ``utf8-split``, ``bpe-seam``, ``special-token-literal``) are the findings.

Example: a completion cut inside a multi-byte character decodes to U+FFFD and cannot be re-encoded::

    ids = [0xF0 0x9F]  ->  decode  ->  "\\ufffd"  ->  encode  ->  [...]     # utf8-split
"""

from __future__ import annotations

from tito_audit.audit.checks.interface import Check
from tito_audit.audit.checks.outcome import FAILED, PASSED, Outcome
from tito_audit.audit.checks.records import token_failure
from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import Completion, trace_of
from tito_audit.audit.core.causes import (
    bpe_seam,
    noncanonical_split,
    normalization,
    special_token_literal,
    utf8_split,
)
from tito_audit.audit.core.diff import first_difference, text_window, token_window
from tito_audit.audit.results import Failure
from tito_audit.conversations.conversation import ASSISTANT, TOOL, USER
from tito_audit.model.tokens import REPLACEMENT_CHAR

NAME = "roundtrip"


def check(context: RolloutContext, outcome: Outcome) -> None:
    if context.setup.text_only:
        return
    trace = trace_of(context)
    for completion in trace.completions:
        completion_roundtrip(context, completion, outcome)
    turn = len(context.conversation.messages) - 1
    if trace.completions:
        decoded = context.setup.codec.decode(trace.buffer)
        _reencode(context, turn, [], "whole buffer", trace.buffer, outcome, (2, 0, 0, 0), decoded)
        _decoded_text(
            context, turn, [], "whole buffer text", trace.buffer, trace.buffer_text, outcome, (2, 0, 0, 1), decoded
        )
    _literal_specials(context, outcome)


def completion_roundtrip(context: RolloutContext, completion: Completion, outcome: Outcome) -> None:
    """decode -> re-encode of the sampled completion (canonical and non-canonical), and whether decoding gives
    back the text the model produced (a normalizer changes it)."""
    roles, turn = [ASSISTANT], completion.turn
    decoded = context.setup.codec.decode(completion.ids)
    for part, (category, ids) in enumerate(
        (("completion (canonical)", completion.ids), ("completion (non-canonical)", completion.noncanonical))
    ):
        if ids is not None:
            own = decoded if ids is completion.ids else context.setup.codec.decode(ids)
            _reencode(context, turn, roles, category, ids, outcome, (1, turn, 2, part), own)
    _decoded_text(
        context, turn, roles, "completion text", completion.ids, completion.text, outcome, (1, turn, 2, 2), decoded
    )


def _reencode(context, turn, roles, category, ids, outcome: Outcome, key, decoded: str) -> None:
    """``decoded``: ``decode(ids)``."""
    codec = context.setup.codec
    again = codec.encode(decoded)
    if again == ids:
        outcome.count(NAME, category, PASSED)
        return
    outcome.count(NAME, category, FAILED)
    if REPLACEMENT_CHAR in decoded:
        cause = utf8_split.NAME
    elif category.endswith("(non-canonical)"):
        cause = noncanonical_split.NAME
    elif codec.decode(again) != decoded:
        cause = normalization.NAME
    else:
        cause = bpe_seam.NAME  # tokens that merge differently once decoded together
    index = first_difference(ids, again) or 0
    failure = token_failure(
        context.setup.decode_one,
        NAME,
        "reencode",
        category,
        context.conversation,
        turn,
        roles,
        [cause],
        ids,
        again,
        index,
    )
    outcome.fail(key, failure)


def _decoded_text(context, turn, roles, category, ids, text: str, outcome: Outcome, key, decoded: str) -> None:
    """``decoded``: ``decode(ids)``."""
    codec, decode_one = context.setup.codec, context.setup.decode_one
    if decoded == text:
        outcome.count(NAME, category, PASSED)
        return
    outcome.count(NAME, category, FAILED)
    index = first_difference(decoded, text) or 0
    plain = codec.encode_plain(text)
    token_index = first_difference(ids, plain) or 0
    failure = Failure(
        check=NAME,
        aspect="text",
        category=category,
        conversation_id=context.conversation.id,
        turn=turn,
        roles=roles,
        causes=[utf8_split.NAME if REPLACEMENT_CHAR in decoded else normalization.NAME],
        char_index=index,
        token_index=token_index,
        expected=token_window(plain, token_index, decode_one),
        actual=token_window(ids, token_index, decode_one),
        expected_text=text_window(text, index),
        actual_text=text_window(decoded, index),
        detail="expected: the text the template rendered; actual: what decoding the ids gives",
    )
    outcome.fail(key, failure)


def _literal_specials(context: RolloutContext, outcome: Outcome) -> None:
    """Message text holding a control-token string that encodes to the control id (role-injection risk)."""
    codec = context.setup.codec
    controls = codec.control_ids_by_text
    for index, message in enumerate(context.conversation.messages):
        content = message.get("content")
        if message.get("role") not in (USER, TOOL) or not isinstance(content, str):
            continue
        present = [c for c in controls if c in content]
        if not present:
            continue
        ids = codec.encode(content)
        hits = [controls[c] for c in present if controls[c] in ids]
        category = f"literal special token in {message.get('role')} text"
        if not hits:
            outcome.count(NAME, category, PASSED)
            continue
        outcome.count(NAME, category, FAILED)
        failure = token_failure(
            context.setup.decode_one,
            NAME,
            "control-token",
            category,
            context.conversation,
            index,
            [str(message.get("role"))],
            [special_token_literal.NAME],
            codec.encode_plain(content),
            ids,
            ids.index(hits[0]),
            detail="expected: the text as plain tokens; actual: how it encodes (a control id)",
        )
        outcome.fail((3, index, 0, 0), failure)


CHECK = Check(NAME, check)
