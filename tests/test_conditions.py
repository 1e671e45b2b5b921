"""When a verdict breaks (docs/contract.md, Verdicts: "Conditions"): the plain loop's verdict and the forms, shapes and
settings the failures come with, read from the steps as they were walked; expectations follow from each template's
reading (tests/templates.py) or, for the shared models, from the issue's hand renders."""

from __future__ import annotations

import pytest

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import default_variant, run_audit
from tito_audit.audit.conditions.verdict_conditions import conditions_of, tally_steps
from tito_audit.audit.results import BROKEN, READY, READY_TOOL_ONLY
from tito_audit.formatters.conditions_lines import conditions_line
from tito_audit.parse import sglang

SHARED_TEMPLATES = SHARED_TOKENIZERS.parent / "templates"
needs_sglang = pytest.mark.skipif(not sglang.available(), reason="SGLang's parsers (extra 'sglang') are not installed")

BACK = "shape: when two assistant turns run back to back"
DEVELOPER = "shape: when a developer message leads the conversation"
WITHOUT = "form: after turns without reasoning"
WITH = "form: after turns with reasoning"


def test_a_shape_is_named_only_where_failing_steps_hold_without_it():
    """GigaChat3.1-like with its parser: the ten failing tool steps follow two assistant turns back to back, and each
    holds once a user turn is put between them; a developer message drawn in two of them is undone too, and they
    still fail: it is not named, however often it comes with the failures."""
    tallies = tally_steps(
        {
            ("tool", (WITHOUT,), (), (), False): [60, 0],
            ("tool", (WITH,), (), (), False): [40, 0],
            ("tool", (BACK, WITHOUT), (BACK,), (BACK,), True): [8, 8],
            ("tool", (BACK, DEVELOPER, WITH), (BACK, DEVELOPER), (BACK,), True): [2, 2],
            ("tool", (DEVELOPER, WITH), (), (), False): [10, 0],
        }
    )
    found = conditions_of(tallies, BROKEN)
    assert (found.plain_verdict, found.plain_steps, found.plain_failed) == (READY, 120, 0)
    assert [(c.name, c.held, c.tried, c.failed, c.steps) for c in found.breaking] == [
        ("when two assistant turns run back to back", 10, 10, 10, 10)
    ]
    assert conditions_line(found) == (
        "plain loop ready; breaks when two assistant turns run back to back (10 of 10 failing tool steps hold without "
        "it)"
    )
    assert {c.name: (c.failed, c.steps) for c in found.drawn}["when a developer message leads the conversation"] == (
        2,
        12,
    )


def test_a_break_that_survives_every_undoing_is_the_plain_loops():
    """Qwen2.5 behind vLLM's hermes: the failing steps were drawn with reused ids, reordered results and reasoning, but
    none holds once those are undone; each holds without the text the model wrote before its call."""
    reused = "shape: when a later turn reuses a call id"
    reordered = "shape: when tool results come in another order than the calls"
    prose = "form: when the model writes text before a call"
    tallies = tally_steps(
        {
            ("tool", (WITHOUT,), (), (), False): [20, 0],
            ("tool", (WITHOUT, prose), (prose, WITHOUT), (prose,), False): [5, 5],
            ("tool", (reused, WITHOUT, prose), (prose, reused, WITHOUT), (prose,), False): [2, 2],
            ("tool", (reordered, WITH, prose), (prose, reordered, WITH), (prose,), False): [5, 5],
            ("tool", (reordered, WITHOUT), (), (), False): [1, 0],
        }
    )
    found = conditions_of(tallies, BROKEN)
    assert (found.plain_verdict, found.plain_failed) == (BROKEN, 12)
    assert [(c.kind, c.name, c.held, c.failed) for c in found.breaking] == [
        ("form", "when the model writes text before a call", 12, 12)
    ]
    # a condition walked again for the first conversations only says how many of its failing steps were tried
    capped = tally_steps(
        {
            ("tool", (WITHOUT, prose), (prose,), (prose,), False): [3, 3],
            ("tool", (WITHOUT, prose), (), (), False): [5, 5],
        }
    )
    (named,) = conditions_of(capped, BROKEN).breaking
    assert (named.held, named.tried, named.failed) == (3, 3, 8)
    assert conditions_line(conditions_of(capped, BROKEN)).endswith(
        "(3 of 3 failing tool steps hold without it; 3 of 8 tried)"
    )


def test_a_ready_tool_only_verdict_counts_the_other_steps():
    """Every user step fails and holds once the turn's reasoning is dropped (Qwen3.5's pruned reasoning): the form is
    named over the non-tool steps; a shape drawn among them that no undoing helps is not."""
    tallies = tally_steps(
        {
            ("tool", (WITH,), (), (), False): [50, 0],
            ("user", (WITH,), (WITH,), (WITH,), False): [30, 30],
            ("user", (DEVELOPER, WITH), (DEVELOPER, WITH), (WITH,), False): [10, 10],
            ("assistant", (BACK, WITH), (), (), False): [20, 0],
        }
    )
    found = conditions_of(tallies, READY_TOOL_ONLY)
    assert found.counted == "non-tool" and found.plain_verdict == READY_TOOL_ONLY
    assert [(c.name, c.held, c.failed) for c in found.breaking] == [("after turns with reasoning", 40, 40)]
    assert conditions_line(found).endswith("(40 of 40 failing non-tool steps hold without it)")


def test_with_no_cause_found_the_line_says_so():
    tallies = tally_steps({("tool", (WITHOUT,), (), (), False): [10, 4], ("tool", (WITH,), (), (), False): [10, 0]})
    found = conditions_of(tallies, BROKEN)
    assert found.breaking == [] and found.plain_verdict == BROKEN
    assert conditions_line(found).endswith("no failing step holds once a form, shape or setting is undone")


def test_a_form_the_template_drops_is_when_it_breaks(tiny_model_dir, write_template):
    """The prompt opens ``<think>\\n`` and history drops an empty block: the steps after the turns whose model closed
    the block at once fail, every one of them, and those steps are the plain loop's (a model writes that form)."""
    source = write_template("drops", templates.PROMPT_OPENS_THINK_HISTORY_DROPS_EMPTY)
    variant = default_variant(run_audit(tiny_model_dir, source, count=32))
    assert variant.verdict == BROKEN and variant.conditions is not None
    assert variant.conditions.plain_verdict == BROKEN
    first = variant.conditions.breaking[0]  # sent back as "", absent or None: each its own form, each failing
    assert first.name.startswith("when the model closes the reasoning block at once")
    assert first.failed == first.steps > 0 and first.held == first.tried > 0  # each holds once the model reasons
    tool_steps = next(row for row in variant.checks["rollout"].rows if row.category == "tool")
    assert sum(t.steps for t in variant.conditions.tallies if t.kind == "tool") == tool_steps.cases - tool_steps.refused


def test_a_setting_worse_than_the_defaults_is_a_condition_of_the_model(tiny_model_dir, write_template):
    """Each setting alone keeps the buffer; thinking on with history reasoning kept does not: the model is broken,
    its plain loop (the default settings) ready, and it breaks with that pair of settings."""
    report = run_audit(tiny_model_dir, write_template("together", templates.ONLY_TOGETHER), count=32)
    conditions = report.conditions
    assert report.verdict == BROKEN and conditions is not None and conditions.plain_verdict == READY
    first = conditions.breaking[0]
    assert (first.kind, first.name) == ("setting", "with enable_thinking=true,preserve_thinking=true")
    assert 0 < first.failed <= first.steps
    # the same failing steps, under the default settings, hold: the setting is their cause
    assert first.held == first.tried == first.failed


@requires_shared
@needs_sglang
def test_gigachat31_breaks_with_its_parser_only_when_two_assistant_turns_run_back_to_back():
    """The template writes no generation prompt after an assistant message, so the model writes
    ``assistant<|role_sep|>`` itself and SGLang's detector keeps it as content; a plain tool loop holds."""
    from tito_audit.audit.service import AuditOptions, audit
    from tito_audit.model.load_by_id import load_by_id

    model = load_by_id("ai-sage/GigaChat3.1-10B-A1.8B", mirrors=[SHARED_TEMPLATES], allow_hub=False)
    report = audit(model, AuditOptions(parser="sglang"))
    (sglang,) = report.parsers
    parsed = sglang.conditions
    assert sglang.engine == "sglang" and sglang.verdict == BROKEN
    assert parsed is not None and parsed.plain_verdict == READY
    assert [c.name for c in parsed.breaking] == ["when two assistant turns run back to back"]
    assert parsed.breaking[0].failed == parsed.breaking[0].steps
