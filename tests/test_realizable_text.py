"""What the model samples is text a model could write (docs/contract.md, Conversations: "Realizable text"), and the
shapes harnesses send are in the grid (docs/contract.md, Conversations: "Shapes harnesses send").

The profile is what the audit reads from a template (:mod:`tito_audit.audit.generation`); these tests give it by
hand, then read the generated messages back: no model-written text holds the reasoning closer or a control token,
call ids have the form the profile names, and each harness shape appears where it applies and nowhere else.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tests import templates
from tests.helpers import default_variant, load, run_audit
from tito_audit.audit.generation import call_ids, renders_developer
from tito_audit.conversations.call_ids import KIMI, NINE, OPENAI
from tito_audit.conversations.conversation import ASSISTANT, TOOL
from tito_audit.conversations.generate import CALL_IDS, LEAD, RESULT_NAMES, RESULT_ORDER, generate
from tito_audit.conversations.profile import GenerationProfile
from tito_audit.conversations.stress import CONTROL_LOOKALIKES, STRESS_TEXTS
from tito_audit.model.load_folder import codec_for
from tito_audit.model.render import Renderer

UNSAMPLED = ("</think>", "<|im_end|>", "<|im_start|>", "<tool_call>", "<|eot_id|>", "</s>", "<end_of_turn>")


def _sampled_texts(conversation) -> list[str]:
    texts = []
    for message in conversation.messages:
        if message["role"] != ASSISTANT:
            continue
        texts += [message.get("content") or "", message.get("reasoning_content") or ""]
        for call in message.get("tool_calls") or []:
            texts.append(str(call["function"]["arguments"]))
    return texts


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**31))
def test_model_text_never_holds_the_closer_or_a_control_token(seed):
    profile = GenerationProfile(unsampled=UNSAMPLED)
    conversations = list(generate(40, seed=seed, profile=profile))
    for conversation in conversations:
        for text in _sampled_texts(conversation):
            assert not any(token in text for token in UNSAMPLED), text


def test_pasted_markup_stays_in_user_system_and_tool_text():
    conversations = list(generate(96, seed=0, profile=GenerationProfile(unsampled=UNSAMPLED)))
    pasted = [
        m["content"]
        for c in conversations
        for m in c.messages
        if m["role"] != ASSISTANT and isinstance(m.get("content"), str)
    ]
    lookalike = STRESS_TEXTS["markup-lookalike"]
    assert any(lookalike in text for text in pasted), "look-alike markup in a user, system or tool message"
    assert any(any(control in text for control in CONTROL_LOOKALIKES) for text in pasted)


def _ids(conversation) -> list[str]:
    return [c["id"] for m in conversation.messages for c in m.get("tool_calls") or []]


def test_call_ids_take_the_form_the_profile_names():
    for form, pattern in ((OPENAI, r"call_[A-Za-z0-9]{24}"), (NINE, r"[A-Za-z0-9]{9}")):
        for conversation in generate(48, seed=3, profile=GenerationProfile(call_ids=form, model_writes_ids=True)):
            assert all(re.fullmatch(pattern, i) for i in _ids(conversation)), _ids(conversation)
    for conversation in generate(48, seed=3, profile=GenerationProfile(call_ids=KIMI, model_writes_ids=True)):
        calls = [c for m in conversation.messages for c in m.get("tool_calls") or []]
        # Kimi's model counts its calls over the conversation and names the function in the id
        assert [c["id"] for c in calls] == [f"functions.{c['function']['name']}:{n}" for n, c in enumerate(calls)]


def test_ids_the_model_writes_are_never_reused_ids_the_engine_gives_sometimes_are():
    reused = [
        c
        for c in generate(96, seed=0, profile=GenerationProfile(model_writes_ids=False))
        if c.shape[CALL_IDS] == "reused"
    ]
    assert reused
    for conversation in reused:
        ids = _ids(conversation)
        assert len(ids) > len(set(ids)), "a later turn answers under an id an earlier call had"
        # results still pair with the call they answer: each turn's calls have distinct ids
        for message in conversation.messages:
            calls = [c["id"] for c in message.get("tool_calls") or []]
            assert len(calls) == len(set(calls))
    written = generate(96, seed=0, profile=GenerationProfile(model_writes_ids=True))
    assert all(c.shape[CALL_IDS] == "fresh" and len(set(_ids(c))) == len(_ids(c)) for c in written)


def test_harness_shapes_appear_where_they_apply():
    conversations = list(generate(96, seed=0, profile=GenerationProfile(developer=True)))
    unnamed = [c for c in conversations if c.shape[RESULT_NAMES] == "absent"]
    assert unnamed and all("name" not in m for c in unnamed for m in c.messages if m["role"] == TOOL)
    assert all(
        "name" in m for c in conversations if c.shape[RESULT_NAMES] == "kept" for m in c.messages if m["role"] == TOOL
    )
    reversed_results = [c for c in conversations if c.shape[RESULT_ORDER] == "reversed"]
    assert reversed_results
    for conversation in reversed_results:
        messages = conversation.messages
        turns = [i for i, m in enumerate(messages) if len(m.get("tool_calls") or []) > 1]
        assert turns
        for turn in turns:
            called = [c["id"] for c in messages[turn]["tool_calls"]]
            answered = [m["tool_call_id"] for m in messages[turn + 1 : turn + 1 + len(called)]]
            assert answered == called[::-1]
    leads = {c.shape[LEAD] for c in conversations}
    assert leads == {"system", "developer", "none"}
    assert all(c.messages[0]["role"] == "developer" for c in conversations if c.shape[LEAD] == "developer")
    no_developer = generate(96, seed=0, profile=GenerationProfile(developer=False))
    assert all(m["role"] != "developer" for c in no_developer for m in c.messages)


def test_the_audit_reads_the_id_form_and_the_developer_role_from_the_template(tiny_model_dir, write_template):
    nine = load(tiny_model_dir, write_template("nine", templates.NINE_CHARACTER_IDS))
    assert call_ids(Renderer(nine, codec_for(nine)).text_or_none, None)[0] is NINE
    good = load(tiny_model_dir, write_template("good", templates.GOOD))
    renderer = Renderer(good, codec_for(good))
    assert call_ids(renderer.text_or_none, None) == (OPENAI, False)  # GOOD never writes ids
    named_by_id = load(tiny_model_dir, write_template("kimi", templates.NAMED_BY_ID))
    assert call_ids(Renderer(named_by_id, codec_for(named_by_id)).text_or_none, None) == (KIMI, True)
    assert call_ids(renderer.text_or_none, "moonshotai/Kimi-K2-Instruct")[0] is KIMI  # its engine parser reads ids
    assert renders_developer(renderer.text_or_none)  # GOOD writes any other role as it is named
    known = load(tiny_model_dir, write_template("known", templates.KNOWN_ROLES_ONLY))
    assert not renders_developer(Renderer(known, codec_for(known)).text_or_none)


def test_each_harness_shape_has_its_cell_in_the_report(tiny_model_dir, write_template):
    variant = default_variant(run_audit(tiny_model_dir, write_template("good", templates.GOOD), count=48))
    cells = {(row.shape, row.form) for row in variant.steps_by_shape}
    for shape, forms in {
        RESULT_NAMES: ("kept", "absent"),
        RESULT_ORDER: ("as called", "reversed"),
        CALL_IDS: ("fresh", "reused"),
    }.items():
        assert {(shape, form) for form in forms} <= cells, (shape, cells)
    assert all(row.failed == 0 for row in variant.steps_by_shape)  # GOOD holds in every shape


def test_a_template_refusing_the_tools_schemas_is_audited_with_the_nearest_schemas_it_takes(
    tiny_model_dir, write_template
):
    """The refusal is reported with its reason and the schema change that rescued the conversation; the tool steps
    are still audited with the template's own tool support."""
    for name, change in (
        ("NO_TYPE_LISTS", "type lists in tool schemas -> anyOf"),
        ("FLAT_TOOLS_ONLY", "tool schemas without their function wrapper"),
    ):
        variant = default_variant(run_audit(tiny_model_dir, write_template(name.lower(), getattr(templates, name))))
        rescued = [r for r in variant.refused if r.accepted_after and change in r.accepted_after]
        assert rescued, (name, [(r.reason, r.accepted_after) for r in variant.refused])
        assert variant.verdict == "ready" and any(row.category == "tool" for row in variant.checks["rollout"].rows)
