"""What the parser is given and what a loop sees (docs/contract.md "The parse step", "What the parser is given"): the
completion as the engine hands it over, a lost call counted whatever the tokens say, no calls without declared tools,
stop tokens that end a generation (not separators inside it), and the layout the family's model writes."""

from __future__ import annotations

import pytest

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import default_variant, load, run_audit
from tests.test_parse_step import ToyParser
from tito_audit.audit.checks.rollout_context import CheckSetup, RolloutContext
from tito_audit.audit.checks.trace import trace_of
from tito_audit.audit.realization.stops import collect_stop_tokens, model_end_token
from tito_audit.audit.results import BROKEN, READY
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.conversations.conversation import Conversation
from tito_audit.conversations.tools import tool_schemas
from tito_audit.model.load_by_id import load_by_id
from tito_audit.model.render import frozen_clock
from tito_audit.parse import sglang
from tito_audit.parse.fields import CALL_LOST
from tito_audit.parse.handover import handed_text
from tito_audit.parse.output_layouts import HARMONY
from tito_audit.parse.parser import ParseInput

SHARED_TEMPLATES = SHARED_TOKENIZERS.parent / "templates"
needs_sglang = pytest.mark.skipif(not sglang.available(), reason="SGLang's parsers (extra 'sglang') are not installed")


def test_the_engine_keeps_the_call_token_only_for_the_harmony_parser():
    text = '<|channel|>commentary to=functions.move <|constrain|>json<|message|>{"d": 1}<|call|>'
    assert handed_text(text, "<|call|>", "gpt-oss") == text
    assert handed_text(text, "<|call|>", "qwen25") == text[: -len("<|call|>")]
    assert handed_text("Done.<|return|>", "<|return|>", "gpt-oss") == "Done."
    assert handed_text("no stop", None, "gpt-oss") == "no stop"


def test_the_harmony_layout_moves_the_recipient_into_the_channel():
    history = (
        "<|channel|>analysis<|message|>x<|end|><|start|>assistant"
        ' to=functions.move<|channel|>commentary json<|message|>{"d": 1}<|call|>'
    )
    written = HARMONY.rewrite(history)
    assert written.endswith(
        '<|start|>assistant<|channel|>commentary to=functions.move <|constrain|>json<|message|>{"d": 1}<|call|>'
    )
    assert HARMONY.rewrite("<|channel|>final<|message|>Done.<|return|>") == "<|channel|>final<|message|>Done.<|return|>"


def test_a_lost_call_fails_its_step_even_when_the_prefix_holds(tiny_model_dir, write_template):
    """The skeleton writes calls as ``<tool_call>NAME ARGS</tool_call>``; a parser that loses them gives the same text
    back as content, which the template renders the same: the buffer still continues, but the harness got no call."""
    model = load(tiny_model_dir, write_template("good", templates.GOOD))
    report = audit(model, AuditOptions(count=48, parser=ToyParser(calls_as_text=True)))
    (parse,) = report.variants[0].parses
    assert report.verdict == READY and [v.verdict for v in report.parsers] == [BROKEN]
    lost = [f for f in parse.failures if f.aspect == "call"]
    assert lost and all(f.causes == ["parse-lossy"] and CALL_LOST in f.detail for f in lost)
    assert parse.fields[CALL_LOST] >= len(lost)


def test_conversations_with_calls_but_no_tools_are_not_walked_with_a_parser(tiny_model_dir, write_template):
    model = load(tiny_model_dir, write_template("good", templates.GOOD))
    report = audit(model, AuditOptions(count=48, parser=ToyParser()))
    (parse,) = report.variants[0].parses
    without = sum(
        1 for c in audit_conversations(48) if c.tools is None and any(m.get("tool_calls") for m in c.messages)
    )
    assert without > 0 and parse.conversations_without_tools == without
    walked = {f.conversation_id for f in parse.failures}
    assert not walked & {c.id for c in audit_conversations(48) if c.tools is None and _has_calls(c)}


def audit_conversations(count: int):
    from tito_audit.conversations.generate import generate

    return list(generate(count, seed=0))


def _has_calls(conversation) -> bool:
    return any(m.get("tool_calls") for m in conversation.messages)


@needs_sglang
def test_sglang_gives_back_the_normal_text_when_it_finds_no_complete_call():
    tools = [{"type": "function", "function": {"name": "move", "parameters": {"type": "object", "properties": {}}}}]
    parser = sglang.SGLangParser("qwen25", None)
    message = parser.parse(ParseInput(text='Let me move.\n<tool_call>\n{"name": "move", "argu', tools=tools))
    assert message["content"] == "Let me move." and "tool_calls" not in message


def test_a_separator_written_inside_a_turn_is_not_a_stop_token(tiny_model_dir, write_template):
    """GigaChat3-like: every part of a turn ends with ``<|eot|>``, the text before a call included; a model stopped
    there could never write its call, so the engine stops on its end-of-sequence token (``<|im_end|>``) instead, and
    history, which writes ``<|eot|>`` there, swaps it."""
    variant = default_variant(run_audit(tiny_model_dir, write_template("sep", templates.SEPARATOR_BEFORE_CALL)))
    stops = {token.text for token in variant.stop_tokens}
    assert "<|eot|>" not in stops and "<|im_end|>" in stops
    assert variant.verdict == BROKEN and "stop-token-swap" in variant.checks["rollout"].cause_counts


def test_the_turn_ends_with_the_models_end_token_where_the_template_writes_a_separator(tiny_model_dir, write_template):
    from tito_audit.audit.service import VariantAudit
    from tito_audit.model.load_folder import codec_for
    from tito_audit.model.variants import Variant

    model = load(tiny_model_dir, write_template("sep", templates.SEPARATOR_BEFORE_CALL))
    codec = codec_for(model)
    variant_audit = VariantAudit(model, codec, Variant("default"), AuditOptions())
    calls = 0
    with frozen_clock(model.template_source, variant_audit.options.clock):
        stops = collect_stop_tokens(variant_audit.renderer, codec, [], [])
        setup = CheckSetup.create(
            variant_audit.renderer, codec, [s.id for s in stops], 0, False, model_end_token(stops)
        )
        for conversation in audit_conversations(12):
            accepted, renders, _ = variant_audit.accept(conversation)
            realized = variant_audit.realize(accepted, renders)
            context = RolloutContext(setup, realized.conversation, realized.renders, realized.alignments)
            for completion in trace_of(context).completions:
                # the model wrote its separators, its calls after them, and stopped where history writes <|eot|>
                assert completion.stopped
                assert completion.text.endswith("<|im_end|>") and not completion.text.endswith("<|eot|><|im_end|>")
                calls += "<tool_call>" in completion.text
    assert calls > 0


@requires_shared
@needs_sglang
def test_kimi_ids_are_the_ones_its_parser_reads_back():
    model = load_by_id("moonshotai/Kimi-K2-Thinking", mirrors=[SHARED_TEMPLATES], allow_hub=False)
    report = audit(model, AuditOptions(count=48, parser="sglang"))
    for variant in report.variants:
        (parse,) = variant.parses
        assert "id changed" not in parse.fields and CALL_LOST not in parse.fields, parse.fields
    assert [v.verdict for v in report.parsers] == [report.verdict]


@requires_shared
@needs_sglang
def test_gpt_oss_calls_are_handed_over_as_the_model_writes_them():
    """Written in harmony with ``<|call|>`` kept, a call after the analysis channel is parsed; re-rendered in the
    template's history layout, the step is tool-call-reformatted (not a lost call)."""
    model = load_by_id("openai/gpt-oss-20b", mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    report = audit(model, AuditOptions(count=48, parser="sglang"))
    (parse,) = default_variant(report).parses
    assert parse.turns_in_model_layout > 0
    reformatted = [f for f in parse.failures if "tool-call-reformatted" in f.causes]
    assert reformatted and all("parse-lossy" not in f.causes for f in reformatted)
    assert "<|constrain|>json" in reformatted[0].expected_text and " json<|message|>" in reformatted[0].actual_text


@requires_shared
@needs_sglang
def test_gigachat3_hands_its_calls_to_the_parser():
    model = load_by_id("ai-sage/GigaChat3-10B-A1.8B", mirrors=[SHARED_TEMPLATES], allow_hub=False)
    report = audit(model, AuditOptions(count=48, parser="sglang"))
    variant = default_variant(report)
    assert "<|message_sep|>" not in {t.text for t in variant.stop_tokens}
    assert CALL_LOST not in variant.parses[0].fields
    assert "stop-token-swap" in variant.checks["rollout"].cause_counts


def _parallel_calls_after_reasoning() -> Conversation:
    """A turn with reasoning and two parallel calls, their results, and an answer (gpt-oss's template drops every call
    after the first, so the audit splits the turn into one-call turns)."""
    calls = [
        {"id": f"call_{n}", "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}
        for n, city in enumerate(("Paris", "Oslo"))
    ]
    return Conversation(
        id="g0000",
        messages=[
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            {"role": "assistant", "content": "", "reasoning_content": "Need both cities.", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "Sunny in Paris."},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "Rain in Oslo."},
            {"role": "assistant", "content": "Sunny in Paris, rain in Oslo."},
        ],
        tools=tool_schemas(),
        must_appear=["Sunny in Paris.", "Rain in Oslo."],
    )


@requires_shared
@needs_sglang
def test_gpt_oss_parallel_calls_are_audited_as_the_one_call_turns_the_model_writes():
    """Generation stops at the first ``<|call|>``, so a turn with two calls is two one-call turns, each written as the
    model writes a call: after its analysis message. No call is lost to that conversion (the split turns used to
    carry no analysis message, which SGLang's gpt-oss detector does not parse)."""
    model = load_by_id("openai/gpt-oss-20b", mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    report = audit(model, AuditOptions(conversations=[_parallel_calls_after_reasoning()], parser="sglang"))
    variant = default_variant(report)
    assert any("parallel tool calls -> one call per turn" in (r.accepted_after or []) for r in variant.refused)
    (parse,) = variant.parses
    assert CALL_LOST not in parse.fields, parse.fields
    assert parse.turns_parsed == 3  # two one-call turns and the answer


@requires_shared
@needs_sglang
def test_gpt_oss_loses_calls_only_where_it_writes_no_analysis_first():
    """SGLang's gpt-oss detector needs the ``<|start|>assistant`` an analysis message leaves before the call: a call
    written with none is lost. That form is the rare one (the registry's habit), drawn for a small share of call
    turns, and every call the parser loses is one of them: none comes from the splitting of parallel calls."""
    model = load_by_id("openai/gpt-oss-20b", mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    (parse,) = default_variant(audit(model, AuditOptions(parser="sglang"))).parses
    calls = parse.calls
    assert calls is not None and calls.rare_form == "the model calls with no analysis message first"
    assert 0 < calls.rare_turns < calls.turns / 5
    assert calls.lost == calls.rare_lost
    assert any(c.kind == "rare form" for c in parse.conditions.drawn)
