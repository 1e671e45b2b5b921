"""The session parses too: ``parse(ids)``, ``extend(ids, tool_messages)``, ``finish(ids)`` with the session's own
parser, and ``bridge="history-free"`` (the stand-in suffix, never rendering the history)."""

from __future__ import annotations

import pytest

from tests.test_parse_step import ToyParser
from tests.test_session import TOOLS, drive, sampled, session_for, tool_loop
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.conversations.conversation import Conversation


def parsed_loop(session, model, messages: list[dict]) -> list[dict]:
    """``messages`` run as an agent loop that lets the session parse: the tool results answer the parsed ids."""
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    session.start(messages[: turns[0]])
    parsed = []
    for n, j in enumerate(turns):
        completion = sampled(model, messages, j, session.stop_ids)
        message = session.parse(completion)
        parsed.append(message)
        if n + 1 == len(turns):
            session.finish(completion)
            break
        results = [dict(m) for m in messages[j + 1 : turns[n + 1]]]
        for result, call in zip(results, message.get("tool_calls") or [], strict=False):
            result["tool_call_id"] = call["id"]
        session.extend(completion, results)
    return parsed


def test_a_parsing_session_keeps_the_buffer_of_one_given_the_messages(models):
    messages = tool_loop(3, content="Let me check.")
    parsing, model = session_for(models, "GOOD", parser=ToyParser())
    parsed = parsed_loop(parsing, model, messages)
    given, _ = session_for(models, "GOOD")
    drive(given, model, messages)
    assert parsing.buffer == given.buffer and parsing.loss_mask == given.loss_mask
    assert [turn.message for turn in parsing.turns] == parsed
    assert parsed[0]["tool_calls"][0]["function"]["name"] == "lookup"
    assert not parsing.breaks


def test_a_lossy_parser_breaks_the_template_bridge_but_not_the_history_free_one(models):
    """Content padded by the model and stripped by the parser: the next prompt rendered from the parsed message no
    longer continues the buffer; the history-free bridge never renders it, and keeps the sampled text."""
    messages = tool_loop(2, content="  Let me check.  ")
    messages[1]["content"] = "  Looking.  "
    strict, model = session_for(models, "GOOD", parser=ToyParser(strip=True), on_break="rerender")
    parsed_loop(strict, model, messages)
    assert strict.breaks, "the prompt rendered from the stripped message does not continue the buffer"
    free, _ = session_for(models, "GOOD", parser=ToyParser(strip=True), bridge="history-free")
    parsed_loop(free, model, messages)
    given, _ = session_for(models, "GOOD")
    drive(given, model, messages)
    assert free.buffer == given.buffer and free.loss_mask == given.loss_mask
    assert all(turn.broke is None for turn in free.turns)


def test_history_free_is_unsound_where_the_audit_says_so(models):
    """A template that numbers tool results: the stand-in suffix differs from the real bridge, the audit's bridge
    check says history-dependent-suffix, and the history-free buffer is not the template's."""
    model, _ = models("TOOL_HEADER_COUNTS_MESSAGES")
    messages = tool_loop(3)
    report = audit(model, AuditOptions(conversations=[Conversation("c", messages, TOOLS)]))
    assert "history-dependent-suffix" in report.variants[0].checks["bridge"].cause_counts
    free, _ = session_for(models, "TOOL_HEADER_COUNTS_MESSAGES", bridge="history-free")
    drive(free, model, messages)
    assert free.buffer != free.template_ids(messages, False)
    good, good_model = session_for(models, "GOOD", bridge="history-free")
    drive(good, good_model, messages)
    checked, _ = session_for(models, "GOOD")
    drive(checked, good_model, messages)
    assert good.buffer == checked.buffer, "where the bridge check holds, the history-free buffer is the template's"


def test_parser_misuse_is_a_clear_error(models):
    plain, _ = session_for(models, "GOOD")
    plain.start(tool_loop(1)[:1])
    with pytest.raises(RuntimeError, match="no parser"):
        plain.parse([1, 2])
    with pytest.raises(ValueError, match="assistant_message is required"):
        plain.extend([1, 2], [{"role": "tool", "content": "x"}])
    with pytest.raises(ValueError, match="perfect inverse"):
        session_for(models, "GOOD", parser="template")
    with pytest.raises(ValueError, match="bridge must be one of"):
        session_for(models, "GOOD", bridge="sometimes")
    with pytest.raises(TypeError, match="parser must be"):
        session_for(models, "GOOD", parser=42)


class SeededParser(ToyParser):
    """:class:`ToyParser` naming each call after the step its hand-over is for (as an engine's parser draws new call
    ids for every completion), and keeping what it was handed."""

    def __init__(self) -> None:
        super().__init__("seeded")
        self.given: list = []

    def parse(self, given):
        self.given.append(given)
        message = super().parse(given)
        for call in message.get("tool_calls") or []:
            call["id"] = "call_step_" + given.call_id_seed.rsplit(":", 1)[1]
        return message


def first_turn(models, parser):
    """A session on GOOD with ``parser``, started, and the ids sampled for its first assistant turn."""
    messages = tool_loop(2)
    session, model = session_for(models, "GOOD", parser=parser)
    first = next(j for j, m in enumerate(messages) if m["role"] == "assistant")
    session.start(messages[:first])
    return session, sampled(model, messages, first, session.stop_ids)


def test_the_same_ids_sampled_at_a_later_step_are_parsed_anew(models):
    """An agent that makes the same call again samples the same ids: the later turn is parsed for its own step (its
    own call ids), not given the earlier turn's message (before: the parse was kept by the ids alone, and both turns
    had the same call id)."""
    parser = SeededParser()
    session, completion = first_turn(models, parser)
    first = session.parse(completion)
    assert session.parse(completion) == first and len(parser.given) == 1  # the same turn asked twice: parsed once
    session.extend(completion, [{"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "Sunny"}])
    again = session.parse(completion)
    assert len(parser.given) == 2
    assert (first["tool_calls"][0]["id"], again["tool_calls"][0]["id"]) == ("call_step_1", "call_step_2")


def test_a_completion_parsed_then_appended_is_decoded_once_and_its_prompt_handed_over_uncopied(models):
    """A server parses a completion at one turn and appends it at the next, on a fork of the same state: the
    completion is decoded in the buffer's context once (before: twice), and the parser is handed the prompt's ids
    without a copy of them (the session's own list, read-only; before: a tuple copy of the whole prompt per parse)."""
    from tito_audit.session.shared_list import AppendOnly

    parser = SeededParser()
    session, completion = first_turn(models, parser)
    codec = session.codec
    decoded: list[list[int]] = []
    decode = codec.decode

    def counting(ids):
        decoded.append(list(ids))
        return decode(ids)

    codec.decode = counting
    try:
        message = session.parse(completion)
        results = [{"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "Sunny"}]
        session.fork().extend(completion, results)
    finally:
        del codec.decode
    assert sum(1 for ids in decoded if ids[-len(completion) :] == completion) == 1
    handed = parser.given[0].prompt_ids
    assert list(handed) == session.buffer
    assert isinstance(handed, AppendOnly) and handed._base is session.state.view_ids
