"""Conditions are causes (docs/contract.md, Verdicts: "Conditions"): templates and parsers whose one cause is known by
construction (tests/templates.py), checked both ways: the true cause is named, with every failing step holding once it
is undone, and no shape that merely comes with the failures is named.

The harness shapes are drawn in about one conversation in four whatever the template, so the failing steps of each of
these templates also carry shapes they do not owe their break to; the old reading by co-occurrence named those.
"""

from __future__ import annotations

import json

import pytest

from tests import templates
from tests.helpers import default_variant, load
from tests.test_parse_step import ToyParser
from tito_audit.audit.parse_step.value_rewrites import rewrites
from tito_audit.audit.results import BROKEN, READY
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.formatters.parse_lines import rewritten_lines

REUSED = "when a later turn reuses a call id"
REORDERED = "when tool results come in another order than the calls"
PROSE = "when the model writes text before a call"
COUNT = 96


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("causes")
    loaded = {}
    for name in ("GOOD", "BREAKS_ON_REUSED_IDS", "BREAKS_ON_REORDERED_RESULTS", "BREAKS_ON_PROSE_BEFORE_CALL"):
        path = folder / f"{name}.jinja"
        path.write_text(getattr(templates, name), encoding="utf-8")
        loaded[name] = load(tiny_model_dir, path)
    return loaded


def _failing_shapes(conditions) -> set[str]:
    """The shapes and forms drawn with some failing tool step (what a reading by co-occurrence could name)."""
    return {c.split(": ", 1)[1] for t in conditions.tallies if t.kind == "tool" and t.failed for c in t.conditions}


@pytest.mark.parametrize(
    ("name", "cause", "plain"),
    [
        ("BREAKS_ON_REUSED_IDS", REUSED, READY),
        ("BREAKS_ON_REORDERED_RESULTS", REORDERED, READY),
        ("BREAKS_ON_PROSE_BEFORE_CALL", PROSE, BROKEN),
    ],
)
def test_the_known_cause_is_named_and_nothing_else(models, name, cause, plain):
    variant = default_variant(audit(models[name], AuditOptions(count=COUNT)))
    conditions = variant.conditions
    assert variant.verdict == BROKEN and conditions is not None
    failing = sum(t.failed for t in conditions.tallies if t.kind == "tool")
    (named,) = conditions.breaking
    # every failing step walked again without the cause holds (the first conversations' steps are walked again)
    assert (named.name, named.failed) == (cause, failing) and named.held == named.tried > 0
    # a shape is a departure from the plain loop, the text before a call a form the model writes by habit
    assert conditions.plain_verdict == plain
    assert conditions.plain_failed == (failing if plain == BROKEN else 0)
    others = _failing_shapes(conditions) - {cause}
    assert any(other.startswith("when") for other in others), "no other shape came with the failures: nothing shown"


def test_a_parsers_break_on_prose_is_named_as_the_form_not_as_its_shapes(models):
    """Qwen2.5 behind vLLM's hermes: the parser keeps a newline after the text before a call, which the template then
    writes twice; the steps hold without the text, whatever shape their conversation was drawn in."""
    (parse,) = audit(models["GOOD"], AuditOptions(count=COUNT, parser=ToyParser(prose_newline=True))).variants[0].parses
    conditions = parse.conditions
    assert parse.verdict == BROKEN and conditions is not None and conditions.plain_verdict == BROKEN
    failing = sum(t.failed for t in conditions.tallies if t.kind == "tool")
    assert [(c.name, c.failed) for c in conditions.breaking] == [(PROSE, failing)]
    assert conditions.breaking[0].held == conditions.breaking[0].tried > 0
    assert _failing_shapes(conditions)


def test_a_value_the_parser_rewrites_is_a_written_value_beside_the_verdict(models):
    """A parser that reads a whole-valued float back as an integer (vLLM's schema coercion): the template then writes
    ``2500`` where the model wrote ``2500.0``. The verdict is the plain loop's (ready); the rewrite is a rate beside
    it, with the first step it broke as evidence."""
    (parse,) = audit(models["GOOD"], AuditOptions(count=COUNT, parser=ToyParser(coerce=True))).variants[0].parses
    assert parse.verdict == READY and not parse.failures and parse.check.failed == 0
    numbers = {value.value_type: value for value in parse.rewritten_values}["number"]
    assert numbers.differing > 0 and numbers.read == str(int(float(numbers.written)))
    (evidence,) = parse.rewrite_failures
    assert evidence.category == "number" and numbers.written in evidence.expected_text
    assert any(line.startswith("number values written") for line in rewritten_lines(parse))
    # the same parser with another defect still breaks: only the rewritten value is taken out of the verdict
    (both,) = (
        audit(models["GOOD"], AuditOptions(count=COUNT, parser=ToyParser(coerce=True, strip=True))).variants[0].parses
    )
    assert both.verdict == BROKEN and all("content" in f.detail for f in both.failures if f.detail)


def test_coercion_is_what_the_toy_parser_does():
    """The parser above coerces whole-valued floats only (as vLLM's ``coerce_to_schema_type`` does for ``number``)."""
    assert _coerced({"a": 2500.0, "b": 2.5, "c": [1.0]}) == {"a": 2500, "b": 2.5, "c": [1.0]}


def _coerced(arguments: dict) -> dict:
    parser = ToyParser(coerce=True)
    text = f"<tool_call>f {json.dumps(arguments)}</tool_call>"
    from tito_audit.parse.parser import ParseInput

    (call,) = parser.parse(ParseInput(text, None))["tool_calls"]
    return json.loads(call["function"]["arguments"])


def test_a_value_the_tokenizer_composes_is_not_one_the_parser_rewrites():
    """A string written with a combining accent comes back composed (NFC) from a tokenizer that normalizes its input
    (Qwen2's): the model's tokens hold no other value, so no parser rewrote it. A value the parser did change (its
    whitespace trimmed, a float read as an integer) still is one."""
    decomposed, composed = "cafe\u0301", "caf\u00e9"
    turn = {"tool_calls": [{"function": {"name": "f", "arguments": {"sku": [decomposed], "n": 2500.0, "s": " a"}}}]}
    back = {
        "tool_calls": [{"function": {"name": "f", "arguments": json.dumps({"sku": [composed], "n": 2500, "s": "a"})}}]
    }
    assert [(r.name, r.read) for r in rewrites(turn, back)] == [("n", 2500), ("s", "a")]
