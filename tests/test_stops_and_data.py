"""Stop tokens read from the template (only text that ends every assistant message), a stop token that is the
first token of the next message, and data a template refuses for its format (tool-call ids).

Expectations follow from reading each template in ``tests/templates.py``.
"""

from __future__ import annotations

import pytest

from tests import templates
from tests.helpers import default_variant, load, run_audit
from tito_audit.audit.realization.stops import template_terminators
from tito_audit.audit.results import READY
from tito_audit.conversations.conversation import Conversation
from tito_audit.conversations.shapes import CALL_IDS, nine_character_id
from tito_audit.model.load_folder import codec_for
from tito_audit.model.registry import registry_stop_tokens
from tito_audit.model.render import Renderer


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("GOOD", ["<|im_end|>"]),
        ("CALL_SECTION", ["<|im_end|>"]),  # not the end of one call, not the end of the call section
        ("ANSWER_AND_CALL_ENDS", ["<|im_end|>", "<|eot|>"]),
        ("NO_END_OF_TURN", []),
    ],
)
def test_template_terminators_end_every_assistant_message(tiny_model_dir, write_template, name, expected):
    model = load(tiny_model_dir, write_template(name.lower(), getattr(templates, name)))
    codec = codec_for(model)
    assert template_terminators(Renderer(model, codec), codec) == expected


def test_stop_token_that_opens_the_next_message_is_sampled(tiny_model_dir, write_template):
    """No message is closed: the engine stops on the next header's ``<|im_start|>``, so the completion ends with
    it and the bridge starts after it; every step is followed and only the last turns have no stop token."""
    path = write_template("noend", templates.NO_END_OF_TURN)
    report = run_audit(tiny_model_dir, path, count=24, extra_stop_tokens=["<|im_start|>"])
    variant = default_variant(report)
    assert variant.verdict == READY, variant.verdict_reason
    notes = " ".join(variant.checks["rollout"].notes)
    # each conversation's final turn is the only one whose stop token the template never writes
    assert f"{variant.conversations_audited} of {variant.assistant_turns} completions contain no stop token" in notes


def test_tool_call_ids_the_template_refuses_are_normalized_not_the_verdict(tiny_model_dir, write_template):
    path = write_template("ids", templates.NINE_CHARACTER_IDS)
    calls = [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]
    conversation = Conversation(
        "short-ids",
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "Sunny."},
            {"role": "assistant", "content": "It is sunny."},
        ],
    )
    variant = default_variant(run_audit(tiny_model_dir, path, conversations=[conversation]))
    assert variant.verdict == READY, variant.verdict_reason
    assert [(r.count, r.accepted_after) for r in variant.refused] == [(1, [CALL_IDS])]
    assert "length 9" in variant.refused[0].reason


def test_normalized_ids_keep_calls_and_results_paired():
    assert nine_character_id("call_1") == nine_character_id("call_1") != nine_character_id("call_2")
    assert len(nine_character_id("x")) == 9 and nine_character_id("x").isalnum()


def test_registry_stop_tokens_name_their_source():
    glm = registry_stop_tokens("zai-org/GLM-4.5")
    assert glm is not None and "<|observation|>" in glm.texts and "generation_config.json" in glm.source
    assert registry_stop_tokens("no-org/no-model") is None


SHARED_TEMPLATES = __import__("tests.conftest", fromlist=["SHARED"]).SHARED / "templates"


@pytest.mark.skipif(not (SHARED_TEMPLATES / "zai-org--GLM-4.5").is_dir(), reason="../shared/templates is absent")
def test_glm_stops_come_from_the_registry_and_open_the_next_message():
    """GLM-4.5's template ends no assistant turn; its generation config stops on <|observation|> and <|user|>
    (registry). A turn followed by tool results is sampled with <|observation|>, the first token of the next
    message, and the bridge starts after it: every tool step is followed."""
    from tito_audit.audit.checks.rollout_context import CheckSetup, RolloutContext
    from tito_audit.audit.checks.trace import trace_of
    from tito_audit.audit.realization.stops import collect_stop_tokens
    from tito_audit.audit.service import AuditOptions, VariantAudit
    from tito_audit.conversations.generate import generate
    from tito_audit.model.load_by_id import load_by_id
    from tito_audit.model.render import frozen_clock
    from tito_audit.model.variants import template_inputs, variants_for

    model = load_by_id("zai-org/GLM-4.5", mirrors=[SHARED_TEMPLATES], allow_hub=False)
    codec = codec_for(model)
    variant = variants_for(template_inputs(model.template_source, codec.tokenizer.special_tokens_map.keys()))[0]
    audit = VariantAudit(model, codec, variant, AuditOptions())
    with frozen_clock(model.template_source, audit.options.clock):
        stops = collect_stop_tokens(audit.renderer, codec, model.generation_eos_ids, (), "zai-org/GLM-4.5", True)
        sources = {s.text: s.sources for s in stops}
        assert {"<|observation|>", "<|user|>", "<|endoftext|>"} <= set(sources)
        assert all(src.startswith("registry: ") for t in ("<|observation|>", "<|user|>") for src in sources[t])
        setup = CheckSetup.create(audit.renderer, codec, [s.id for s in stops], 0, True)
        observation = codec.id_of("<|observation|>")
        followed_by_tools = 0
        for conversation in generate(24, 0, 4, audit.profile):
            accepted, renders, _ = audit.accept(conversation)
            if accepted is None:
                continue
            realized = audit.realize(accepted, renders)
            context = RolloutContext(setup, realized.conversation, realized.renders, realized.alignments)
            messages = realized.conversation.messages
            for completion in trace_of(context).completions:
                if completion.turn + 1 < len(messages) and messages[completion.turn + 1]["role"] == "tool":
                    followed_by_tools += 1
                    assert completion.stopped and completion.ids[-1] == observation
            assert all(step.followed for step in trace_of(context).steps if step.kind == "tool")
        assert followed_by_tools > 10
