"""Realizable turns and attribution by message (docs/contract.md "Realizable turns", "Attribution").

Each template in ``tests/templates.py`` below has one behaviour of a real family: a prompt that closes the
reasoning block (Qwen3/3.5 with thinking off), one that opens a block history never shows (QwQ), a tool
result closed differently when last (Hermes 3). The expectations follow from reading the templates.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import templates
from tests.helpers import causes, default_variant, failed, run_audit, variant_audits
from tito_audit.audit.realization.realize import ALIGNED, GEN_PROMPT_MISMATCH, HISTORY_REWRITE, with_reasoning_form
from tito_audit.audit.results import BROKEN, READY
from tito_audit.conversations.conversation import ASSISTANT
from tito_audit.conversations.generate import generate, generate_conversation
from tito_audit.model.render import RenderError


def _with_every_reasoning_kind(count: int = 48) -> list:
    """Generated conversations drawn for every reasoning kind, whatever the variant allows."""
    return list(generate(count, seed=0))


def test_prompt_that_closes_the_block_is_ready_and_reasoning_turns_are_not_realizable(tiny_model_dir, write_template):
    path = write_template("closes", templates.PROMPT_CLOSES_THINK)
    report = run_audit(tiny_model_dir, path, conversations=_with_every_reasoning_kind())
    variant = default_variant(report)
    assert report.verdict == READY, variant.verdict_reason
    assert failed(variant, "rollout") == 0
    assert not any(f.cause == "gen-prompt-mismatch" for f in variant.findings)
    groups = {(g.original, g.audited_as): g for g in variant.unrealizable}
    # a turn with reasoning cannot follow a prompt that already closed the block: audited without it
    assert ("reasoning present", "reasoning absent") in groups
    group = groups[("reasoning present", "reasoning absent")]
    assert group.count > 0 and "</think>" in group.prompt and "closes" in group.reason
    assert {g.original for g in variant.unrealizable} <= {"reasoning present", "reasoning empty"}


def test_generated_turns_aim_for_what_the_variant_allows(tiny_model_dir, write_template):
    path = write_template("closes", templates.PROMPT_CLOSES_THINK)
    variant = default_variant(run_audit(tiny_model_dir, path, count=48))
    assert variant.unrealizable == []
    assert any("closes the reasoning block" in note and ": absent" in note for note in variant.checks["rollout"].notes)
    assert failed(variant, "rollout") == 0


def test_prompt_that_closes_the_block_is_broken_when_history_drops_the_empty_block(tiny_model_dir, write_template):
    path = write_template("drops", templates.PROMPT_CLOSES_THINK_HISTORY_DROPS_EMPTY)
    report = run_audit(tiny_model_dir, path, conversations=_with_every_reasoning_kind())
    variant = default_variant(report)
    assert report.verdict == BROKEN
    assert "empty-think-dropped" in causes(variant, "rollout")
    assert "gen-prompt-mismatch" not in causes(variant, "rollout")
    dropped = [f for f in variant.failures if f.check == "rollout" and "empty-think-dropped" in f.causes]
    assert dropped and all(f.message_role == ASSISTANT and f.message_was_last for f in dropped)


def test_prompt_that_opens_a_block_history_strips_stays_broken(tiny_model_dir, write_template):
    path = write_template("qwq", templates.PROMPT_OPENS_THINK_HISTORY_STRIPS)
    report = run_audit(tiny_model_dir, path, conversations=_with_every_reasoning_kind())
    variant = default_variant(report)
    assert report.verdict == BROKEN
    assert "gen-prompt-mismatch" in causes(variant, "rollout")
    mismatched = [f for f in variant.failures if "gen-prompt-mismatch" in f.causes]
    assert mismatched and all(f.message_index is None for f in mismatched)
    assert variant.unrealizable == []  # no form of the turn aligns: nothing is "realized" instead


def test_tool_result_closed_differently_when_last_is_a_rewrite_of_the_tool_message(tiny_model_dir, write_template):
    path = write_template("hermes", templates.TOOL_CLOSED_DIFFERENTLY_WHEN_LAST)
    report = run_audit(tiny_model_dir, path, count=48)
    variant = default_variant(report)
    assert report.verdict == BROKEN
    rollout = [f for f in variant.failures if f.check == "rollout" and f.aspect == "text"]
    assert rollout
    for failure in rollout:
        assert failure.causes == ["closing-rewritten"], failure
        assert failure.message_role == "tool" and failure.message_was_last
        assert failure.message_index is not None and failure.message_index < failure.turn
    assert "gen-prompt-mismatch" not in causes(variant, "rollout")
    assert not any(f.cause == "gen-prompt-mismatch" for f in variant.findings)


def test_tool_results_joined_in_one_block_are_closing_rewrites_in_every_check(tiny_model_dir, write_template):
    """A tool result followed by another tool result is re-closed (the next result joins its block): the
    divergence lies after the earlier result's own text, so it is ``closing-rewritten`` of that tool message,
    in the append check as in the rollout, never ``content-rewritten`` (no message text changed)."""
    path = write_template("joined", templates.TOOL_RESULTS_JOINED_IN_ONE_BLOCK)
    variant = default_variant(run_audit(tiny_model_dir, path, count=48))
    text_failures = [f for f in variant.failures if f.aspect == "text" and f.check in ("append", "rollout")]
    tool_after_tool = [f for f in text_failures if f.check == "append" and f.category == "tool after tool"]
    assert tool_after_tool, "consecutive tool results are generated, and each re-closes the one before"
    for failure in text_failures:
        assert failure.causes == ["closing-rewritten"], failure
        assert failure.message_role == "tool" and failure.message_was_last, failure


def test_correct_template_has_no_unrealizable_turn_and_no_attributed_rewrite(tiny_model_dir, write_template):
    path = write_template("good", templates.GOOD)
    variant = default_variant(run_audit(tiny_model_dir, path, conversations=_with_every_reasoning_kind()))
    assert variant.unrealizable == []
    assert not [f for f in variant.failures if f.message_index is not None and f.check == "rollout"]


def test_thinking_switch_is_ready_in_every_variant(tiny_model_dir, write_template):
    path = write_template("switch", templates.THINKING_SWITCH)
    report = run_audit(tiny_model_dir, path, conversations=_with_every_reasoning_kind())
    assert [v.name for v in report.variants] == ["default", "enable_thinking=false", "enable_thinking=true"]
    assert report.verdict == READY, [(v.name, v.verdict_reason) for v in report.variants]
    off = next(v for v in report.variants if v.name == "enable_thinking=false")
    assert off.unrealizable and {g.original for g in off.unrealizable} == {"reasoning present", "reasoning empty"}


def test_prompt_that_opens_a_block_history_keeps_is_ready(tiny_model_dir, write_template):
    """The prompt opens ``<think>`` and history renders the block whenever the message has reasoning (even
    empty): a model always reasons here, and what it wrote stays. Turns without reasoning are not realizable."""
    path = write_template("opens", templates.GEN_PROMPT_OPENS_THINK)
    variant = default_variant(run_audit(tiny_model_dir, path, conversations=_with_every_reasoning_kind()))
    assert variant.verdict == READY, variant.verdict_reason
    assert {g.original for g in variant.unrealizable} == {"reasoning absent"}
    assert {g.audited_as for g in variant.unrealizable} <= {"reasoning empty", "reasoning present"}
    assert "opens" in variant.unrealizable[0].reason


# -- property: every audited turn is realizable, or reported -------------------------------------------------

PROPERTY_TEMPLATES = (
    "GOOD",
    "PROMPT_CLOSES_THINK",
    "PROMPT_CLOSES_THINK_HISTORY_DROPS_EMPTY",
    "PROMPT_OPENS_THINK_HISTORY_STRIPS",
    "TOOL_CLOSED_DIFFERENTLY_WHEN_LAST",
    "THINKING_SWITCH",
    "EMPTY_THINK_ONLY_WHEN_LAST",
    "GEN_PROMPT_OPENS_THINK",
)


@pytest.fixture(scope="module")
def property_audits(tiny_model_dir, tmp_path_factory):
    """(template name, variant audit, its kwargs) for every variant of every property template."""
    folder = tmp_path_factory.mktemp("property")
    audits = []
    for name in PROPERTY_TEMPLATES:
        path = folder / f"{name}.jinja"
        path.write_text(getattr(templates, name), encoding="utf-8")
        audits += [(name, audit, dict(audit.variant.kwargs)) for audit in variant_audits(tiny_model_dir, path)]
    return audits


def _render(tokenizer, template, messages, tools, gp, kwargs) -> str:
    return tokenizer.apply_chat_template(
        messages, tools=tools, chat_template=template, add_generation_prompt=gp, tokenize=False, **kwargs
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, 287), seed=st.integers(0, 3))
def test_every_audited_turn_is_realizable_or_reported(property_audits, index, seed):
    """Rendered independently through ``apply_chat_template``: an aligned or realized turn's ``F`` starts with
    its ``P``; a history rewrite departs before the prompt and names an earlier message; a mismatch is one no
    reasoning form of the message could avoid. Nothing else."""
    for name, variant_audit, kwargs in property_audits:
        conversation = generate_conversation(index, seed)
        audited, renders, _ = variant_audit.accept(conversation)
        if audited is None:
            continue
        realized = variant_audit.realize(audited, renders)
        model = variant_audit.model
        tokenizer, template = model.tokenizer, model.template_source
        messages, tools = realized.conversation.messages, realized.conversation.tools
        reported = {(u.conversation_id, u.turn) for u in realized.unrealized}
        for j, message in enumerate(messages):
            if message.get("role") != ASSISTANT:
                continue
            alignment = realized.alignments[j]
            prompt = _render(tokenizer, template, messages[:j], tools, True, kwargs)
            full = _render(tokenizer, template, messages[: j + 1], tools, False, kwargs)
            where = f"{name} {kwargs} {conversation.id} turn {j}"
            assert (alignment.form is not None) == ((conversation.id, j) in reported), where
            if alignment.status == ALIGNED:
                assert full.startswith(prompt), where
            elif alignment.status == HISTORY_REWRITE:
                history = _render(tokenizer, template, messages[:j], tools, False, kwargs)
                assert not full.startswith(prompt), where
                assert alignment.rewritten is not None and alignment.rewritten.index < j, where
                assert full[: alignment.divergence] == prompt[: alignment.divergence], where
                assert alignment.divergence < len(history), where
            else:
                assert alignment.status == GEN_PROMPT_MISMATCH, where
                for form in ("reasoning absent", "reasoning empty", "reasoning present"):
                    variant_messages = [*messages[:j], with_reasoning_form(message, form)]
                    try:
                        other = _render(tokenizer, template, variant_messages, tools, False, kwargs)
                    except (RenderError, Exception):
                        continue
                    assert not other.startswith(prompt), f"{where}: {form} would align"
