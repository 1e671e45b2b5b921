"""Property tests of the conversation generator: valid shapes, determinism per seed, grid coverage."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tito_audit.conversations.conversation import ASSISTANT, SYSTEM, TOOL, USER, steps_of
from tito_audit.conversations.generate import (
    HARNESS_SHAPES,
    RESULT_NAMES,
    RESULT_ORDER,
    SHAPE_AXES,
    SHAPE_GRID,
    generate,
    generate_conversation,
)

seeds = st.integers(min_value=0, max_value=2**31)
indices = st.integers(min_value=0, max_value=2000)


@settings(max_examples=150, deadline=None)
@given(seed=seeds, index=indices, max_turns=st.integers(min_value=2, max_value=7))
def test_generated_conversations_are_valid(seed, index, max_turns):
    conversation = generate_conversation(index, seed, max_turns)
    messages = conversation.messages
    roles = [m["role"] for m in messages]
    assert set(roles) <= {SYSTEM, USER, ASSISTANT, TOOL}
    assert roles[-1] == ASSISTANT, "a rollout ends with the model's turn"
    assert USER in roles[:2]
    assert 2 <= roles.count(ASSISTANT) <= max_turns
    shape = conversation.shape
    assert set(shape) == set(SHAPE_AXES) | set(HARNESS_SHAPES)
    open_calls: dict[str, str] = {}
    answered: list[str] = []
    for message in messages:
        if message["role"] == ASSISTANT:
            assert not open_calls, "every call is answered before the next assistant turn"
            calls = message.get("tool_calls") or []
            for call in calls:
                arguments = call["function"]["arguments"]
                if shape["args"] == "dict":
                    assert isinstance(arguments, dict)
                else:
                    assert isinstance(json.loads(arguments), dict)
                assert call["id"].startswith("call_") and len(call["id"]) == 29 and call["id"][5:].isalnum()
                open_calls[call["id"]] = call["function"]["name"]
            if calls:
                expected = {"one": 1, "parallel": None}[shape["calls"]]
                assert len(calls) == expected if expected else len(calls) >= 2
                content = message["content"]
                assert {"empty": content == "", "none": content is None, "text": bool(content)}[shape["content"]]
                order = [call["id"] for call in calls]
            reasoning = message.get("reasoning_content")
            assert {
                "absent": "reasoning_content" not in message,
                "none": "reasoning_content" in message and reasoning is None,
                "empty": reasoning == "",
                "present": bool(reasoning),
            }[shape["reasoning"]]
        elif message["role"] == TOOL:
            name = open_calls.pop(message["tool_call_id"])
            if shape[RESULT_NAMES] == "absent":
                assert "name" not in message
            else:
                assert message["name"] == name
            answered.append(message["tool_call_id"])
            assert any(needle in message["content"] for needle in conversation.must_appear)
            if not open_calls and shape[RESULT_ORDER] == "reversed" and len(answered) == len(order) > 1:
                assert answered == order[::-1]
            if not open_calls:
                answered = []
    assert (conversation.tools is not None) == (shape["tools"] == "present")
    kinds = {step.kind for step in steps_of(messages)}
    if shape["appended"] == ASSISTANT:
        assert ASSISTANT in kinds


@settings(max_examples=60, deadline=None)
@given(seed=seeds, index=indices)
def test_same_seed_same_conversation(seed, index):
    assert generate_conversation(index, seed) == generate_conversation(index, seed)


@settings(max_examples=30, deadline=None)
@given(seed=seeds, count=st.integers(min_value=1, max_value=40))
def test_conversation_i_does_not_depend_on_count(seed, count):
    short = list(generate(count, seed))
    longer = list(generate(count + 5, seed))
    assert longer[:count] == short


def test_first_grid_round_visits_every_shape_once():
    shapes = [tuple(sorted(c.shape.items())) for c in generate(len(SHAPE_GRID), seed=7)]
    assert len(set(shapes)) == len(SHAPE_GRID)


def test_different_seeds_differ():
    assert list(generate(5, seed=1)) != list(generate(5, seed=2))


def test_a_habit_of_text_before_each_call_leaves_a_small_share_of_calls_without():
    """A model that writes its analysis before each call (gpt-oss, in the registry) writes a call turn with neither
    reasoning nor content at the registry's small share, not in the grid's three cells in four; the other turns and
    every other draw are those of a profile without the habit."""
    from tito_audit.audit.generation import rare_share_without_text
    from tito_audit.conversations.profile import GenerationProfile

    share = rare_share_without_text("openai/gpt-oss-20b")
    assert share is not None and 0 < share < 0.25
    assert rare_share_without_text("Qwen/Qwen3-4B") is None
    habit = GenerationProfile(text_before_calls=share)

    def call_turns(profile):
        return [
            m for c in generate(400, 0, 4, profile) for m in c.messages if m.get("tool_calls") and not m.get("content")
        ]

    bare = [m for m in call_turns(habit) if not m.get("reasoning_content")]
    turns = call_turns(habit)
    assert 0 < len(bare) < 2 * share * len(turns), (len(bare), len(turns))
    plain = call_turns(GenerationProfile())
    assert len(plain) == len(turns)
    assert sum(not m.get("reasoning_content") for m in plain) > len(plain) / 2
