"""A model may close its reasoning block at once (docs/contract.md "Realizable turns"): realizability from the prompt.

Each template below has one behaviour of a real family (see ``tests/templates.py``); the expectations follow
from reading the templates: the prompt ``<|im_start|>assistant\\n<think>\\n`` opens a block, so a turn with empty
reasoning is one a model can produce, whatever history makes of it.
"""

from __future__ import annotations

import json

import pytest

from tests import templates
from tests.helpers import causes, default_variant, failed, run_audit, variant_audits
from tito_audit.audit.results import BROKEN, READY, UNSUPPORTED
from tito_audit.conversations.conversation import ASSISTANT, TOOL, USER, Conversation
from tito_audit.conversations.datasources import load_conversations
from tito_audit.conversations.generate import generate
from tito_audit.conversations.profile import GenerationProfile
from tito_audit.conversations.reasoning_forms import CLOSED, NO_BLOCK, OPEN, UNKNOWN, short_kind


def _tool_steps_after_empty(variant) -> tuple[int, int]:
    """Tool steps after turns whose model closed the block at once (sent back as "", absent or None)."""
    rows = [f for f in variant.steps_by_form if f.kind == TOOL and f.form.startswith("reasoning empty")]
    return sum(f.steps for f in rows), sum(f.failed for f in rows)


@pytest.mark.parametrize(
    "name",
    ["PROMPT_OPENS_THINK_HISTORY_DROPS_EMPTY", "PROMPT_OPENS_THINK_HISTORY_DROPS_NEWLINE"],
)
def test_history_that_drops_or_alters_the_empty_block_is_broken_at_tool_steps(tiny_model_dir, write_template, name):
    """History drops the empty block (MiniMax-like) or writes it without the prompt's newline (Nemotron-like)."""
    variant = default_variant(
        run_audit(tiny_model_dir, write_template(name.lower(), getattr(templates, name)), count=48)
    )
    assert variant.verdict == BROKEN, variant.verdict_reason
    assert "empty-think-dropped" in causes(variant, "rollout")
    steps, failing = _tool_steps_after_empty(variant)
    assert steps > 0 and failing == steps  # every tool step after a turn that closed the block at once
    assert all(f.failed == 0 for f in variant.steps_by_form if f.kind == TOOL and f.form == "reasoning present")
    empty = [c for c in variant.conditions.breaking if c.name.startswith("when the model closes the reasoning block")]
    # each failing step holds once the model reasons instead (the block is then kept): the form is the cause
    assert sum(c.failed for c in empty) == failing and all(c.held == c.tried > 0 for c in empty)
    assert variant.conditions.breaking[: len(empty)] == empty  # they come first: most failing steps hold without them
    dropped = [f for f in variant.failures if f.check == "rollout" and "empty-think-dropped" in f.causes]
    assert dropped and all(f.message_role == ASSISTANT for f in dropped if f.category == TOOL)
    # the evidence shows what the model wrote (the closer right after the prompt's opener) and what history has
    first = next(f for f in dropped if f.category == TOOL)
    assert "<think>" + "\n" + "\n</think>" in first.expected_text  # the block as the model closed it
    assert "<think>\n\n</think>" not in first.actual_text  # history drops it, or writes it another way
    assert "gen-prompt-mismatch" not in causes(variant, "rollout")


def test_history_that_writes_a_block_for_every_turn_is_ready(tiny_model_dir, write_template):
    path = write_template("always", templates.PROMPT_OPENS_THINK_HISTORY_ALWAYS_BLOCK)
    variant = default_variant(run_audit(tiny_model_dir, path, count=48))
    assert variant.verdict == READY, variant.verdict_reason
    steps, failing = _tool_steps_after_empty(variant)
    assert steps > 0 and failing == 0


def test_empty_reasoning_sent_back_absent_is_its_own_form(tiny_model_dir, write_template):
    """History keeps an empty block given as ``""`` and drops it when the field is absent or None: the turns whose
    harness sent the model's empty reasoning back without it fail, those sent back as ``""`` hold."""
    path = write_template("keeps", templates.PROMPT_OPENS_THINK_HISTORY_KEEPS_EMPTY)
    variant = default_variant(run_audit(tiny_model_dir, path, count=96))
    forms = {(f.kind, f.form): (f.steps, f.failed) for f in variant.steps_by_form}
    kept, dropped = forms[(TOOL, "reasoning empty")], forms[(TOOL, "reasoning empty, sent back without it")]
    assert kept[0] > 0 and kept[1] == 0
    assert dropped[0] > 0 and dropped[1] == dropped[0]
    assert variant.verdict == BROKEN
    named = {c.name: c for c in variant.conditions.breaking}
    sent_back = named["when the model closes the reasoning block at once and the harness sends it back absent"]
    assert (sent_back.failed, sent_back.steps) == (dropped[1], dropped[0])
    assert sent_back.held == sent_back.tried > 0  # each holds once the model reasons
    assert "when the model closes the reasoning block at once" not in named  # sent back as "", it holds
    failure = next(
        f for f in variant.failures if f.check == "rollout" and f.category == TOOL and "empty-think-dropped" in f.causes
    )
    assert "<think>\n\n</think>" in failure.expected_text and "<think>\n\n</think>" not in failure.actual_text


def test_prompt_that_closes_the_block_admits_no_reasoning_and_nothing_fails(tiny_model_dir, write_template):
    path = write_template("closes", templates.PROMPT_CLOSES_THINK)
    variant = default_variant(run_audit(tiny_model_dir, path, conversations=list(generate(48, seed=0))))
    assert variant.verdict == READY and failed(variant, "rollout") == 0
    # neither reasoning nor an empty block can follow a prompt that already closed the block
    assert {g.original for g in variant.unrealizable} == {"reasoning present", "reasoning empty"}
    assert {g.audited_as for g in variant.unrealizable} == {"reasoning absent"}
    assert all("closes" in g.reason for g in variant.unrealizable)


def test_realizable_form_is_never_swapped_for_one_that_aligns(tiny_model_dir, write_template):
    """Given conversations with empty reasoning under an opening prompt: audited as given (not as reasoning
    present, which would align), so the failure shows."""
    path = write_template("drops", templates.PROMPT_OPENS_THINK_HISTORY_DROPS_EMPTY)
    empty = [c for c in generate(48, seed=0) if c.shape["reasoning"] == "empty"]
    variant = default_variant(run_audit(tiny_model_dir, path, conversations=empty))
    assert variant.unrealizable == []
    assert variant.verdict == BROKEN


# -- the final appended step of a real conversation -------------------------------------------------------------

CUT_AFTER_TOOL_RESULT = [
    {"role": "system", "content": "You are a helpful agent with tools."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        ],
    },
    {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "Sunny, 21 C."},
]


def test_conversation_ending_with_a_tool_result_has_its_final_step_audited(tiny_model_dir, write_template, tmp_path):
    """One assistant turn, then a tool result: the only appended step is the final one, whose next prompt is
    ``render(M, gp=True)``. History ends the sampled turn with another token than the model stopped on."""
    path = write_template("swap", templates.STOP_TOKEN_SWAPPED_IN_HISTORY)
    data = tmp_path / "cut.json"
    data.write_text(json.dumps([{"messages": CUT_AFTER_TOOL_RESULT}]), encoding="utf-8")
    report = run_audit(tiny_model_dir, path, conversations=load_conversations(data).conversations)
    variant = default_variant(report)
    assert variant.verdict == BROKEN, variant.verdict_reason
    failure = next(f for f in variant.failures if f.check == "rollout" and f.aspect == "text")
    assert failure.turn == len(CUT_AFTER_TOOL_RESULT) and failure.category == TOOL
    assert "stop-token-swap" in failure.causes
    assert any("final appended step" in note for note in variant.checks["rollout"].notes)


def test_final_step_of_a_stable_template_passes(tiny_model_dir, write_template):
    path = write_template("good", templates.GOOD)
    conversation = Conversation("cut", [dict(m) for m in CUT_AFTER_TOOL_RESULT])
    variant = default_variant(run_audit(tiny_model_dir, path, conversations=[conversation]))
    rows = {row.category: row for row in variant.checks["rollout"].rows}
    assert rows[TOOL].cases == 1 and rows[TOOL].passed == 1
    assert variant.verdict == READY


def test_a_conversation_without_an_assistant_turn_has_no_step(tiny_model_dir, write_template):
    path = write_template("good", templates.GOOD)
    conversation = Conversation("ask", [{"role": USER, "content": "Hi"}])
    report = run_audit(tiny_model_dir, path, conversations=[conversation])
    assert report.verdict == UNSUPPORTED


# -- property: every form the prompt admits is generated ----------------------------------------------------------

PROPERTY_TEMPLATES = (
    "GOOD",
    "PROMPT_CLOSES_THINK",
    "PROMPT_CLOSES_THINK_HISTORY_DROPS_EMPTY",
    "PROMPT_OPENS_THINK_HISTORY_STRIPS",
    "THINKING_SWITCH",
    "GEN_PROMPT_OPENS_THINK",
    "PROMPT_OPENS_THINK_HISTORY_DROPS_EMPTY",
    "PROMPT_OPENS_THINK_HISTORY_KEEPS_EMPTY",
    "PROMPT_OPENS_THINK_HISTORY_ALWAYS_BLOCK",
    "PROMPT_OPENS_THINK_HISTORY_DROPS_NEWLINE",
)
EXPECTED_STATE = {
    "GOOD": NO_BLOCK,
    "PROMPT_CLOSES_THINK": CLOSED,
    "PROMPT_CLOSES_THINK_HISTORY_DROPS_EMPTY": CLOSED,
    "PROMPT_OPENS_THINK_HISTORY_STRIPS": UNKNOWN,
    "GEN_PROMPT_OPENS_THINK": OPEN,
    "PROMPT_OPENS_THINK_HISTORY_DROPS_EMPTY": OPEN,
    "PROMPT_OPENS_THINK_HISTORY_KEEPS_EMPTY": OPEN,
    "PROMPT_OPENS_THINK_HISTORY_ALWAYS_BLOCK": OPEN,
    "PROMPT_OPENS_THINK_HISTORY_DROPS_NEWLINE": OPEN,
}
"""What each template's default prompt leaves open, read from the template by hand."""


@pytest.mark.parametrize("name", PROPERTY_TEMPLATES)
def test_every_form_the_prompt_admits_is_generated(tiny_model_dir, tmp_path, name):
    path = tmp_path / f"{name}.jinja"
    path.write_text(getattr(templates, name), encoding="utf-8")
    for audit in variant_audits(tiny_model_dir, path):
        reasoning = audit.reasoning
        if audit.variant.name == "default" and name in EXPECTED_STATE:
            assert reasoning.state == EXPECTED_STATE[name], (name, reasoning)
        admitted = {short_kind(form) for form in reasoning.realizable}
        profile = GenerationProfile(reasoning=reasoning.kinds, prompt_opens_reasoning=reasoning.state == OPEN)
        drawn = {c.shape["reasoning"] for c in generate(96, seed=0, profile=profile)}
        # no reasoning is written "none" (reasoning_content: None) too; under an open block, absent and None are the
        # empty reasoning the model wrote, sent back without it
        expected = admitted | ({"none"} if "absent" in admitted else set())
        if reasoning.state == OPEN:
            expected |= {"absent", "none"}
        assert drawn == expected, (name, audit.variant.name)


def test_the_state_is_read_from_each_prompt_not_from_what_history_renders(tiny_model_dir, write_template):
    """The thinking switch: ``enable_thinking=false`` closes the block, the other settings open it."""
    path = write_template("switch", templates.THINKING_SWITCH)
    audits = variant_audits(tiny_model_dir, path)
    states = {audit.variant.name: audit.reasoning.state for audit in audits}
    assert states == {"default": OPEN, "enable_thinking=false": CLOSED, "enable_thinking=true": OPEN}
    prompt = audits[0].renderer.text([{"role": USER, "content": "x"}], None, True)
    assert prompt.endswith("<think>\n")
