"""The engine's log-probabilities in a TitoSession: one entry per buffer position, the given value on each sampled
id and None on what the template wrote, through bridges (template and history-free), a ``warn`` break that keeps the
buffer and a ``rerender`` that rewrites it (where they follow the loss mask); bad values are refused naming the
position and leave the session as it was.

The values are made here, distinct per turn and position, so that each one found in the buffer says which sampled
id it was given for."""

from __future__ import annotations

import math
import warnings

import pytest

from tests.test_session import CASES, call, sampled, session_for, tool_loop
from tito_audit import TitoSession
from tito_audit.errors import BadInputError


def values_for(turn: int, ids: list[int]) -> list[float]:
    """Distinct log-probabilities for turn ``turn``: -(turn + position/1000 + 0.0001)."""
    return [-(turn + position / 1000 + 0.0001) for position in range(len(ids))]


def origin(value: float) -> tuple[int, int]:
    """The (turn, position) :func:`values_for` gave ``value`` for."""
    turn = math.floor(-value)
    return turn, round((-value - turn - 0.0001) * 1000)


def drive(session: TitoSession, model, messages: list[dict]) -> dict[int, list[int]]:
    """``messages`` through ``session``, each completion with its log-probabilities; returns the completions."""
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    used: dict[int, list[int]] = {}
    session.start(messages[: turns[0]])
    for n, j in enumerate(turns):
        used[j] = completion = sampled(model, messages, j, session.stop_ids)
        if n + 1 < len(turns):
            session.extend(completion, messages[j], messages[j + 1 : turns[n + 1]], logprobs=values_for(j, completion))
        else:
            session.finish(completion, messages[j], logprobs=values_for(j, completion))
    return used


def assert_each_value_names_its_sampled_id(session: TitoSession, used: dict[int, list[int]]) -> None:
    buffer, mask, logprobs = session.buffer, session.loss_mask, session.logprobs
    assert len(logprobs) == len(buffer) == len(mask)
    for position, value in enumerate(logprobs):
        if value is not None:
            turn, index = origin(value)
            assert used[turn][index] == buffer[position], position
            assert mask[position] == 1


@pytest.mark.parametrize("bridge", ["template", "history-free"])
def test_logprobs_sit_on_the_sampled_ids_and_none_elsewhere(models, bridge):
    session, model = session_for(models, "GOOD", bridge=bridge)
    used = drive(session, model, tool_loop(3, reasoning="Let me look."))
    logprobs = session.logprobs
    expected: list[float | None] = [None] * len(session.buffer)
    for turn in session.turns:
        start, end = turn.completion
        expected[start:end] = values_for(turn.message_index, used[turn.message_index])
    assert logprobs == expected
    assert [value is not None for value in logprobs] == [bool(bit) for bit in session.loss_mask]
    assert_each_value_names_its_sampled_id(session, used)


def test_warn_keeps_the_logprobs_with_the_buffer_it_keeps(models):
    session, model = session_for(models, "REASONING_AFTER_LAST_USER_ONLY", on_break="warn")
    messages = [
        *CASES[-1][1][:5],
        {"role": "assistant", "content": "", "reasoning_content": "Call.", "tool_calls": [call("Oslo")]},
        {"role": "tool", "content": "Snow", "tool_call_id": "call_Oslo"},
        {"role": "assistant", "content": "Snow in Oslo."},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        used = drive(session, model, messages)
    assert session.breaks
    assert sum(value is not None for value in session.logprobs) == sum(len(c) for c in used.values())
    assert_each_value_names_its_sampled_id(session, used)


def test_rerender_keeps_logprobs_only_where_the_sampled_ids_survive(models):
    session, model = session_for(models, "STOP_TOKEN_SWAPPED_IN_HISTORY", on_break="rerender")
    used = drive(session, model, tool_loop(2))
    assert [b.turn for b in session.breaks] == [3, 5]
    logprobs, mask = session.logprobs, session.loss_mask
    assert [value is not None for value in logprobs] == [bool(bit) for bit in mask]
    assert_each_value_names_its_sampled_id(session, used)
    # the last completion came after the last re-render: all of its values are there, in order
    start, end = session.turns[-1].completion
    assert logprobs[start:end] == values_for(5, used[5])
    # the earlier completions were rewritten (their stop token swapped): some of their values are gone
    assert sum(value is not None for value in logprobs[:start]) < len(used[1]) + len(used[3])


def test_bad_logprobs_are_refused_naming_the_position_and_change_nothing(models):
    session, model = session_for(models, "GOOD")
    messages = tool_loop(1)
    session.start(messages[:1])
    completion = sampled(model, messages, 1, session.stop_ids)
    before = (session.buffer, session.loss_mask, session.logprobs)
    good = [-0.5] * len(completion)
    cases = [
        (good[:-1], f"has {len(completion) - 1} values for {len(completion)} sampled ids"),
        ([0.5, *good[1:]], r"logprobs\[0\] is 0.5, not a log-probability"),
        ([*good[:-1], float("nan")], rf"logprobs\[{len(completion) - 1}\] is nan"),
        ([-0.1, float("-inf"), *good[2:]], r"logprobs\[1\] is -inf"),
        ([-0.1, "-0.2", *good[2:]], r"logprobs\[1\] is '-0.2' \(str\), not a number"),
        ([True, *good[1:]], r"logprobs\[0\] is True \(bool\), not a number"),
        ("-0.5", "must be a sequence of numbers, not str"),
    ]
    for bad, message in cases:
        with pytest.raises(BadInputError, match=message):
            session.extend(completion, messages[1], messages[2:3], logprobs=bad)
        assert (session.buffer, session.loss_mask, session.logprobs) == before
    with pytest.raises(BadInputError, match="without completion_ids"):
        session.extend(None, messages[1], messages[2:3], logprobs=[])


def test_logprobs_from_arrays_none_where_missing_and_a_cut_last_turn(models):
    numpy = pytest.importorskip("numpy")
    session, model = session_for(models, "GOOD")
    messages = tool_loop(1)
    session.start(messages[:1])
    first = sampled(model, messages, 1, session.stop_ids)
    given = numpy.array([-0.25] * len(first), dtype=numpy.float32)
    session.extend(first, messages[1], messages[2:3], logprobs=given)
    last = sampled(model, messages, 3, session.stop_ids)[:-1]  # cut by the length limit: no stop token
    session.finish(last, messages[3], logprobs=[None, *([-1.5] * (len(last) - 1))])
    start, end = session.turns[0].completion
    assert session.logprobs[start:end] == [-0.25] * len(first)
    start, end = session.turns[1].completion
    assert session.logprobs[start:end] == [None, *([-1.5] * (len(last) - 1))]
    assert len(session.logprobs) == len(session.buffer) and session.turns[1].stopped is False


def test_held_bytes_count_the_logprobs_kept(models):
    with_values, model = session_for(models, "GOOD")
    without, _ = session_for(models, "GOOD")
    messages = tool_loop(1)
    for session in (with_values, without):
        session.start(messages[:1])
    completion = sampled(model, messages, 1, with_values.stop_ids)
    with_values.extend(completion, messages[1], messages[2:3], logprobs=[-0.1] * len(completion))
    without.extend(completion, messages[1], messages[2:3])
    assert with_values.buffer == without.buffer
    assert with_values.held_bytes - without.held_bytes == 24 * len(completion)
