"""The mask check (docs/contract.md "The checks", 5): a template's ``{% generation %}`` mask against what the model
sampled.

Expectations come from reading the toy templates (tests/templates.py, "training masks") and from the tokenizer itself,
never from the code under test: MASK_HEADER_INSIDE marks the header ``<|im_start|>assistant\\n`` it writes before the
sampled text, MASK_STOP_OUTSIDE closes its block before ``<|im_end|>``, and so on.
"""

from __future__ import annotations

import doctest
import json
from dataclasses import asdict

import pytest

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import default_variant, load, run_audit
from tito_audit.audit.checks import mask, mask_compare
from tito_audit.audit.results import READY
from tito_audit.conversations.conversation import Conversation
from tito_audit.errors import TemplateTimeoutError
from tito_audit.model import assistant_mask
from tito_audit.model.assistant_mask import MaskedRender, generation_blocks
from tito_audit.model.load_folder import codec_for
from tito_audit.model.render import Renderer, RenderError, RenderLimits

COUNT = 16
HEADER = "<|im_start|>assistant\n"


def _mask(variant):
    return variant.checks[mask.NAME]


def _judged(check) -> int:
    return sum(r.cases - r.refused for r in check.rows if r.category != mask.NOT_AS_SAMPLED)


def _first(variant, label: str):
    return next(f for f in variant.failures if f.check == mask.NAME and f.causes == [label])


def test_a_template_without_generation_blocks_is_not_applicable(models):
    model, path = models("GOOD")
    variant = default_variant(run_audit(model.resolved.path, path, count=COUNT))
    check = _mask(variant)
    assert check.rows == [] and check.cause_counts == {} and mask.NOT_APPLICABLE in check.notes


def test_a_block_around_what_the_model_samples_trains_every_turn_as_sampled(models):
    model, path = models("MASK_GOOD")
    variant = default_variant(run_audit(model.resolved.path, path, count=COUNT))
    check = _mask(variant)
    assert _judged(check) == variant.assistant_turns > 0
    assert check.cause_counts == {} and all(r.failed == 0 for r in check.rows)
    assert not [f for f in variant.failures if f.check == mask.NAME]
    assert "generation block at line 1" in check.notes[0]


@pytest.mark.parametrize(
    ("name", "label", "quoted", "where"),
    [
        ("MASK_HEADER_INSIDE", mask_compare.INJECTED_TRAINED, repr(HEADER), "the generation prompt"),
        ("MASK_TAIL_INSIDE", mask_compare.INJECTED_TRAINED, repr("\n"), "after the stop token"),
        ("MASK_EMPTY_THINK_INSIDE", mask_compare.INJECTED_TRAINED, repr("<think></think>"), "the generation prompt"),
        ("MASK_STOP_OUTSIDE", mask_compare.STOP_TOKEN_UNTRAINED, repr("<|im_end|>"), "outside the mask"),
    ],
)
def test_each_failure_kind_is_found_in_every_turn_and_located(
    models, tiny_tokenizer, write_template, name, label, quoted, where
):
    model, path = models(name)
    report = run_audit(model.resolved.path, path, count=COUNT)
    variant = default_variant(report)
    check = _mask(variant)
    judged = _judged(check)
    assert judged == variant.assistant_turns > 0
    assert check.cause_counts[label] == judged  # every turn writes the same block around the same text
    if label == mask_compare.INJECTED_TRAINED:
        assert mask_compare.STOP_TOKEN_UNTRAINED not in check.cause_counts
        assert mask_compare.SAMPLED_UNTRAINED not in check.cause_counts
        injected = quoted[1:-1].encode().decode("unicode_escape")
        size = len(tiny_tokenizer(injected, add_special_tokens=False)["input_ids"])
        assert f"{size} token{'s' if size > 1 else ''} the model never sampled" in _first(variant, label).detail
    else:
        assert mask_compare.INJECTED_TRAINED not in check.cause_counts
    failure = _first(variant, label)
    assert quoted in failure.detail and where in failure.detail and "generation block at line 1" in failure.detail
    # beside the verdict, never in it: the blocks write no text, so every other table is the blockless template's
    blockless = write_template(
        name + "_plain", getattr(templates, name).replace(templates.GEN_OPEN, "").replace(templates.GEN_CLOSE, "")
    )
    plain = default_variant(run_audit(model.resolved.path, blockless, count=COUNT))
    assert variant.verdict == plain.verdict == READY
    assert variant.checks["rollout"] == plain.checks["rollout"]


def test_tool_calls_written_after_the_block_are_untrained(models):
    """MASK_CALLS_OUTSIDE closes its block before the calls: every tool-call turn leaves sampled tokens (its calls) and
    every turn its stop token out of the mask."""
    model, path = models("MASK_CALLS_OUTSIDE")
    variant = default_variant(run_audit(model.resolved.path, path, count=COUNT))
    check = _mask(variant)
    calls = next(r for r in check.rows if r.category == mask.TOOL_CALL)
    assert check.cause_counts[mask_compare.STOP_TOKEN_UNTRAINED] == _judged(check)
    assert check.cause_counts[mask_compare.SAMPLED_UNTRAINED] >= calls.cases - calls.refused > 0
    first = _first(variant, mask_compare.SAMPLED_UNTRAINED)
    assert first.category == mask.TOOL_CALL and "'<tool_call>" in first.detail


def test_a_stop_token_that_opens_the_next_message_is_judged_where_the_template_writes_it(models):
    """MASK_GLM_LIKE closes no turn; the engine stops on the next header's ``<|im_start|>``, which no block marks: the
    turn followed by a tool result fails, the final turn (no stop token sampled) is trained as sampled."""
    model, path = models("MASK_GLM_LIKE")
    calls = [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]
    conversation = Conversation(
        "glm",
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "Sunny."},
            {"role": "assistant", "content": "It is sunny."},
        ],
    )
    report = run_audit(
        model.resolved.path, path, conversations=[conversation], extra_stop_tokens=["<|im_start|>"], parser="template"
    )
    variant = default_variant(report)
    rows = {r.category: (r.cases, r.passed, r.failed) for r in _mask(variant).rows}
    assert rows == {mask.TOOL_CALL: (1, 0, 1), mask.ANSWER: (1, 1, 0)}
    failure = _first(variant, mask_compare.STOP_TOKEN_UNTRAINED)
    assert failure.turn == 1 and "opens the next message" in failure.detail


def test_the_mask_compared_is_transformers_own(models, tiny_tokenizer):
    """The check's mask is ``apply_chat_template(..., return_assistant_tokens_mask=True)``'s, through the guarded
    renderer: computed here without the tool, the marked tokens of MASK_HEADER_INSIDE are the header and the answer."""
    model, _ = models("MASK_HEADER_INSIDE")
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    masked = assistant_mask.assistant_mask(Renderer(model, codec_for(model)), messages, None)
    direct = tiny_tokenizer.apply_chat_template(
        messages,
        chat_template=templates.MASK_HEADER_INSIDE,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    assert masked.ids == direct["input_ids"] and masked.mask == direct["assistant_masks"]
    marked = tiny_tokenizer.decode([i for i, bit in zip(masked.ids, masked.mask, strict=True) if bit])
    assert marked == HEADER + "Hello<|im_end|>"  # the newline after it is written after the block


def test_a_template_that_loops_forever_in_its_block_is_refused_in_time(tiny_model_dir, write_template):
    spin = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    hostile = "{% for m in messages %}{% generation %}" + spin + "{% endgeneration %}{% endfor %}"
    model = load(tiny_model_dir, write_template("hostile", hostile))
    messages = [{"role": "assistant", "content": "x"}]
    quick = RenderLimits(max_seconds=0.5, refuse_after_timeout=False)
    with pytest.raises(RenderError, match=r"longer than 0\.5s"):
        assistant_mask.assistant_mask(Renderer(model, codec_for(model), limits=quick), messages, None)
    with pytest.raises(TemplateTimeoutError):
        assistant_mask.assistant_mask(
            Renderer(model, codec_for(model), limits=RenderLimits(max_seconds=0.5)), messages, None
        )


def test_the_check_is_deterministic(models):
    model, path = models("MASK_CALLS_OUTSIDE")

    def masked_parts():
        variant = default_variant(run_audit(model.resolved.path, path, count=8))
        failures = [asdict(f) for f in variant.failures if f.check == mask.NAME]
        return json.dumps([asdict(_mask(variant)), failures], sort_keys=True)

    assert masked_parts() == masked_parts()


def test_tokens_are_placed_by_the_characters_they_cover():
    """A token with trimmed (empty) offsets inside the completion is sampled, not injected; tokens before the region
    belong to earlier turns and are not judged."""
    masked = MaskedRender([1, 2, 3, 4, 5, 6], [1, 0, 1, 1, 1, 0], [(0, 3), (3, 5), (5, 8), (8, 8), (8, 11), (11, 12)])
    span = mask_compare.TurnSpan(region=3, prompt=3, start=5, end=11, stop=8)
    judged = mask_compare.compare(masked, span)
    assert judged.sampled == [2, 3, 4] and judged.stop == 4 and judged.labels == []
    masked.mask[4] = 0
    assert mask_compare.compare(masked, span).labels == [mask_compare.STOP_TOKEN_UNTRAINED]


def test_generation_block_lines_come_from_the_lexer():
    source = "{% for m in messages %}\n{%- if m.role == 'assistant' %}\n{% generation %}\n{{ m.content }}\n"
    source += "{%- endgeneration %}\n{%- endif %}{% endfor %}"
    assert generation_blocks(source) == [(3, 5)]
    assert generation_blocks("{{ 'generation' }}") == []


@pytest.mark.parametrize("module", [assistant_mask, mask_compare])
def test_docstring_examples(module):
    assert doctest.testmod(module).failed == 0


@requires_shared
def test_smollm3_trains_its_role_header():
    """SmolLM3's block opens before ``<|im_start|>assistant\\n`` (the generation prompt) and closes after the newline
    that follows ``<|im_end|>``: every judged turn trains tokens the model never sampled; the stop token is marked."""
    from tito_audit.audit.service import AuditOptions, audit
    from tito_audit.model.load_by_id import load_by_id

    model = load_by_id("HuggingFaceTB/SmolLM3-3B", mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    report = audit(model, AuditOptions(count=8, parser="template"))
    for variant in report.variants:
        check = _mask(variant)
        assert _judged(check) > 0
        assert check.cause_counts == {mask_compare.INJECTED_TRAINED: _judged(check)}
        detail = _first(variant, mask_compare.INJECTED_TRAINED).detail
        assert "the first '<|im_start|>assistant\\n" in detail and "(the generation prompt)" in detail
        if variant.kwargs.get("enable_thinking") is False:  # the prompt writes the closed empty block: trained too
            assert "<think>\\n\\n</think>" in detail
        assert "lines 76–82" in check.notes[0]


def test_the_matrix_and_the_model_page_say_it_beside_the_verdict(models):
    from tito_audit.formatters.site import model_page
    from tito_audit.matrix.row import row_from_report
    from tito_audit.matrix.tables import to_markdown

    model, path = models("MASK_HEADER_INSIDE")
    report = run_audit(model.resolved.path, path, count=8)
    judged = sum(_judged(_mask(v)) for v in report.variants)
    row = row_from_report(report, "models/x.md", 1.0)
    assert row["mask"] == f"injected-trained {judged}/{judged} turns" and row["verdict"] == READY
    assert "| training mask |" in to_markdown([row], {"seed": 0, "count": 8})
    assert f"injected-trained {judged}/{judged} turns" in model_page(report)
    plain_model, plain = models("GOOD")
    plain_report = run_audit(plain_model.resolved.path, plain, count=8)
    assert row_from_report(plain_report, "", 1.0)["mask"] == "n/a"
    assert "Training mask: n/a, the template has no {% generation %} blocks" in model_page(plain_report)
