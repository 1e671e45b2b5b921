"""Realization renders each prefix of a conversation once however many of its turns it replaces (issue 53), and gives
what the thorough walk gives (every later prefix rendered while each replaced turn's form is tried)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import templates
from tests.helpers import load
from tito_audit.audit.realization import realize as realization
from tito_audit.audit.realization.reasoning_block import variant_reasoning
from tito_audit.audit.realization.turn_renders import LaterRefusal
from tito_audit.conversations.conversation import Conversation
from tito_audit.conversations.generate import generate
from tito_audit.conversations.tools import tool_schemas
from tito_audit.model.render import Renderer
from tito_audit.model.tokens import TokenCodec

REFUSES_REASONING_AFTER_A_TURN_WITHOUT = templates.build(
    preamble="{%- set seen = namespace(without=false) -%}{%- for x in messages -%}{%- if x.role == 'assistant' -%}"
    "{%- if x.reasoning_content -%}{%- if seen.without -%}{{ raise_exception('reasoning after a turn without') }}"
    "{%- endif -%}{%- else -%}{%- set seen.without = true -%}{%- endif -%}{%- endif -%}{%- endfor -%}",
    gen=templates.CLOSED_THINK_PROMPT,
)
"""Thinking off (a turn with reasoning is replaced by one without), and a template that refuses a turn with reasoning
after one without: only a conversation as generated, mixing the two, is refused."""

REFUSES_THREE_TURNS_OPENED_WITHOUT_REASONING = templates.build(
    preamble="{%- set turns = messages | selectattr('role', 'equalto', 'assistant') | list -%}"
    "{%- if turns | length > 2 and not turns[0].reasoning_content -%}"
    "{{ raise_exception('three turns, the first without reasoning') }}{%- endif -%}",
    gen=templates.CLOSED_THINK_PROMPT,
)
"""Thinking off, and a template that refuses a third turn after a first without reasoning: replacing the first turn
makes a prefix two turns later refused."""


def _walk(model, conversation: Conversation, thorough: bool | None):
    """(the realized conversation, prefixes rendered while walking): the walk ``realize`` makes (None), or the one
    named."""
    renderer = Renderer(model, TokenCodec(model.tokenizer))
    block = variant_reasoning(renderer.text_or_none, tool_schemas()).block
    renders = renderer.prefixes(conversation.messages, conversation.tools, realization.turn_keys(conversation.messages))
    asked: list[int] = []

    def prefixes(messages, tools, keys):
        asked.append(len(keys))
        return renderer.prefixes(messages, tools, keys)

    if thorough is None:
        realized = realization.realize(conversation, renders, prefixes, renderer.texts, block)
    else:
        realized = realization._walk(conversation, renders, prefixes, renderer.texts, block, thorough=thorough)
    return realized, sum(asked)


def _same(first, second) -> None:
    assert first.conversation.messages == second.conversation.messages
    assert first.alignments == second.alignments
    assert first.unrealized == second.unrealized
    assert list(first.renders) == list(second.renders)
    assert {k: (r.text, r.ids) for k, r in first.renders.items()} == {
        k: (r.text, r.ids) for k, r in second.renders.items()
    }


def _thinking_turns(turns: int, reasoning_in: int | None = None) -> Conversation:
    """A count over ``turns`` assistant turns, each with reasoning (or only the first ``reasoning_in``)."""
    messages = [{"role": "user", "content": "Count with me."}]
    for number in range(turns):
        turn = {"role": "assistant", "content": f"{number}."}
        if reasoning_in is None or number < reasoning_in:
            turn["reasoning_content"] = "The next number."
        messages += [turn, {"role": "user", "content": "Go on."}]
    return Conversation(id="thinking", messages=messages, tools=None)


@pytest.mark.parametrize(
    "source", [templates.PROMPT_CLOSES_THINK, templates.PROMPT_OPENS_THINK_HISTORY_STRIPS, templates.GOOD]
)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_each_prefix_rendered_once_gives_what_the_thorough_walk_gives(tiny_model_dir, write_template, source, seed):
    model = load(tiny_model_dir, write_template("template", source))
    for conversation in generate(6, seed=seed, max_turns=6):
        lazy, lazy_renders = _walk(model, conversation, None)
        thorough, thorough_renders = _walk(model, conversation, True)
        _same(lazy, thorough)
        assert lazy_renders <= thorough_renders


def test_a_conversation_whose_every_turn_is_replaced_costs_renders_in_proportion_to_its_turns(
    tiny_model_dir, write_template
):
    model = load(tiny_model_dir, write_template("closes", templates.PROMPT_CLOSES_THINK))
    conversation = _thinking_turns(12)
    lazy, lazy_renders = _walk(model, conversation, None)
    thorough, thorough_renders = _walk(model, conversation, True)
    _same(lazy, thorough)
    assert all(alignment.form == "reasoning absent" for alignment in lazy.alignments.values())
    keys = len(realization.turn_keys(conversation.messages))  # 37: three per turn and the last prompt
    assert lazy_renders <= keys
    assert thorough_renders > 5 * keys  # every later prefix again at each of the 12 replacements


def test_a_form_is_tried_against_the_conversation_as_it_is_realized(tiny_model_dir, write_template):
    """Each turn loses its reasoning: the template refuses a mix of the two, and no prefix the audit walks mixes them
    (the thorough walk, trying the first turn against later turns still as generated, keeps all but the last)."""
    model = load(tiny_model_dir, write_template("refuses", REFUSES_REASONING_AFTER_A_TURN_WITHOUT))
    conversation = _thinking_turns(4)
    realized, _ = _walk(model, conversation, None)
    turns = conversation.assistant_indices()
    assert [realized.alignments[j].form for j in turns] == ["reasoning absent"] * 4
    thorough, _ = _walk(model, conversation, True)
    assert [thorough.alignments[j].form for j in turns] == [None, None, None, "reasoning absent"]


def test_a_later_prefix_the_template_refuses_makes_the_walk_thorough(tiny_model_dir, write_template):
    model = load(tiny_model_dir, write_template("refuses", REFUSES_THREE_TURNS_OPENED_WITHOUT_REASONING))
    conversation = _thinking_turns(3, reasoning_in=1)
    with pytest.raises(LaterRefusal):  # the quick walk meets the third turn after it replaced the first
        _walk(model, conversation, False)
    realized, _ = _walk(model, conversation, None)
    _same(realized, _walk(model, conversation, True)[0])
    turns = conversation.assistant_indices()
    # the first turn keeps its reasoning (not realizable, and the only form the template renders with the third)
    assert [realized.alignments[j].form for j in turns] == [None, None, None]
    assert realized.conversation.messages[turns[0]]["reasoning_content"] == "The next number."
