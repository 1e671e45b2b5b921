"""Fixes (``tito_audit.repair.fixes``) and the way out: each fix turns its template ready with a no-change proof that
holds; a template the fix must not apply to is left alone, with the reason; a setting that suffices means no
patch. Expectations follow from reading each template (tests/templates.py)."""

from __future__ import annotations

import pytest

from tests import templates
from tests.helpers import load
from tito_audit.audit.results import BROKEN, READY, READY_TOOL_ONLY
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.repair.fixes import (
    as_sampled,
    closing_as_followed,
    empty_block_always,
    empty_block_kept,
    history_boundary,
    reasoning_kept,
)
from tito_audit.repair.fixes.search import search_fix
from tito_audit.repair.fixes.source import TemplateSource
from tito_audit.repair.way_out import FIX, NONE, SETTING, find_way_out

OPTIONS = AuditOptions(count=24)


def _way_out(tiny_model_dir, write_template, name: str):
    model = load(tiny_model_dir, write_template(name.lower(), getattr(templates, name)))
    before = audit(model, OPTIONS)
    return before, find_way_out(model, before, OPTIONS, audit)


@pytest.mark.parametrize(
    ("name", "fix", "label"),
    [
        ("MULTILINE_EMPTY_THINK", as_sampled.NAME, "keep the empty think block"),
        ("EMPTY_THINK_ONLY_WHEN_LAST", as_sampled.NAME, "keep the empty think block"),
        ("REASONING_AFTER_LAST_USER_ONLY", as_sampled.NAME, "keep reasoning in history"),
        ("STOP_TOKEN_SWAPPED_IN_HISTORY", as_sampled.NAME, "end every assistant turn with the terminator"),
        ("CONTENT_TRIMMED_IN_HISTORY", as_sampled.NAME, "render message text as sampled"),
        ("TOOL_CLOSED_DIFFERENTLY_WHEN_LAST", closing_as_followed.NAME, "close a message the same way"),
        ("TOOL_RESULTS_JOINED_IN_ONE_BLOCK", closing_as_followed.NAME, "close a message the same way"),
        ("QWQ_LIKE", reasoning_kept.NAME, "render reasoning in the block the generation prompt opens"),
        ("HISTORY_SLICED_AT_LAST_ANSWER", history_boundary.NAME, "keep reasoning in history"),
        ("PROMPT_OPENS_THINK_HISTORY_DROPS_EMPTY", empty_block_always.NAME, "keep the empty think block"),
        ("PROMPT_OPENS_THINK_HISTORY_DROPS_NEWLINE", empty_block_always.NAME, "keep the empty think block"),
        ("PROMPT_OPENS_THINK_HISTORY_CONCATENATES", empty_block_always.NAME, "keep the empty think block"),
    ],
)
def test_each_fix_makes_its_template_ready_and_changes_nothing_else(tiny_model_dir, write_template, name, fix, label):
    before, way = _way_out(tiny_model_dir, write_template, name)
    assert before.verdict in (BROKEN, READY_TOOL_ONLY), before.verdict
    assert way.kind == FIX, way.summary
    outcome = way.fix
    assert outcome is not None and outcome.after is not None and outcome.proof is not None
    assert outcome.after.verdict == READY, [(v.name, v.verdict_reason) for v in outcome.after.variants]
    assert [applied.rule.name for applied in outcome.applied] == [fix]
    assert any(text.startswith(label) for text in outcome.labels()), outcome.labels()
    assert outcome.proof.holds and outcome.proof.compared > 0, outcome.proof.summary()
    assert outcome.proof.changed > 0, "the fix changes the renders it claims to touch"
    # the verdict offered is the audit of the patched template, with the original's settings
    patched = load(tiny_model_dir, write_template(name.lower() + "_fixed", outcome.patched_source))
    assert audit(patched, OPTIONS).verdict == READY


def test_ready_template_is_left_alone(tiny_model_dir, write_template):
    model = load(tiny_model_dir, write_template("good", templates.GOOD))
    before = audit(model, OPTIONS)
    outcome = search_fix(model, before, OPTIONS, audit)
    assert before.verdict == READY and not outcome.offered and outcome.patched_source is None
    assert outcome.reason


def test_fix_that_does_not_remove_the_cause_is_not_offered(tiny_model_dir, write_template):
    """The prompt writes a closed think block no rendered turn shows (no opening for reasoning-kept to keep, no
    position test to replace): nothing is offered, and the reason names what is left."""
    before, way = _way_out(tiny_model_dir, write_template, "PROMPT_CLOSES_THINK_HISTORY_NEVER_SHOWS")
    assert before.verdict == BROKEN
    assert way.kind == NONE and way.summary.startswith("none known:")
    assert way.fix is not None and not way.fix.offered and way.fix.patched_source is None


def test_setting_that_suffices_means_no_patch(tiny_model_dir, write_template):
    before, way = _way_out(tiny_model_dir, write_template, "PRESERVE_THINKING_SWITCH")
    assert before.verdict == READY_TOOL_ONLY
    recommendation = before.recommendation
    assert recommendation is not None and recommendation.setting == "preserve_thinking=true"
    assert recommendation.verdict == READY and not recommendation.changes_generation_prompt
    assert recommendation.evidence.startswith("0 of ") and " 0 of " in recommendation.evidence
    assert way.kind == SETTING and way.fix is None and way.summary == "setting preserve_thinking=true → ready"


def test_position_tests_of_inner_loops_are_not_touched():
    source = TemplateSource.parse(templates.PARALLEL_CALLS_JOINED)
    assert as_sampled.edits(source) == []
    assert closing_as_followed.edits(source) == []


def test_as_sampled_gives_each_test_its_value_for_the_last_message():
    source = TemplateSource.parse(templates.REASONING_AFTER_LAST_USER_ONLY)
    edits = as_sampled.edits(source)
    assert [(source.source[e.start : e.end], e.text) for e in edits] == [("loop.index0 > ns.last_user", "true")]
    swapped = TemplateSource.parse(templates.STOP_TOKEN_SWAPPED_IN_HISTORY)
    assert [(swapped.source[e.start : e.end], e.text) for e in as_sampled.edits(swapped)] == [("loop.last", "true")]


def test_template_source_knows_the_branch_of_each_token():
    source = TemplateSource.parse(
        "{%- for m in messages -%}"
        "{%- if m.role == 'assistant' -%}A{{ loop.last }}"
        "{%- elif m['role'] in ['user', 'system'] -%}U{{ loop.first }}"
        "{%- else -%}T{{ loop.index }}"
        "{%- endif -%}{%- for c in m.tool_calls or [] -%}{{ loop.last }}{%- endfor -%}"
        "{%- endfor -%}{{ loop_outside }}"
    )
    roles = {}
    for i, token in enumerate(source.code()):
        if token.text == "loop":
            following = source.code()[i + 2].text
            roles[(following, token.in_message_loop)] = token.roles
    assert roles[("last", True)] == {"assistant"}
    assert roles[("first", True)] == {"user", "system"}
    assert roles[("index", True)] == {"tool"}
    assert ("last", False) in roles  # the tool-call loop's own loop.last


def test_patch_cli_writes_a_verified_fix_and_says_when_a_setting_suffices(tiny_model_dir, write_template, tmp_path):
    from tests.test_cli import run_cli

    out = tmp_path / "fixed.jinja"
    qwq = write_template("qwq", templates.QWQ_LIKE)
    result = run_cli("patch", str(tiny_model_dir), "--template", str(qwq), "-n", "24", "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no-change proof holds" in result.stdout and "reasoning-kept" in result.stdout
    assert "reasoning_content" in out.read_text() and (tmp_path / "fixed.jinja.diff").is_file()
    # its training form beside it: the same text, generation blocks around what the model samples
    assert "{%- generation -%}" in (tmp_path / "fixed.training.jinja").read_text() and "training form:" in result.stdout
    switch = write_template("switch", templates.PRESERVE_THINKING_SWITCH)
    other = tmp_path / "other.jinja"
    result = run_cli("patch", str(tiny_model_dir), "--template", str(switch), "-n", "24", "-o", str(other))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "a setting suffices" in result.stdout and "preserve_thinking=true" in result.stdout
    assert not other.exists()
    assert "{%- generation -%}" in (tmp_path / "other.training.jinja").read_text()  # the model's own, with blocks


def test_empty_block_kept_edits_only_truth_tests_of_the_reasoning_field():
    """Truth tests of the reasoning (the field, or a variable read from it) become "is a string"; a negated test,
    a comparison and a test outside the assistant branch stay as they are."""
    source = (
        "{%- for message in messages -%}{%- if message.role == 'assistant' -%}"
        "{%- set rc = message.reasoning_content | default('') -%}"
        "{%- if rc and loop.last -%}A{%- endif -%}"
        "{%- if not rc -%}B{%- endif -%}"
        "{%- if message.reasoning_content | trim | length > 0 -%}C{%- endif -%}"
        "{%- if message.reasoning_content | length > 5 -%}D{%- endif -%}"
        "{%- elif message.reasoning_content -%}E{%- endif -%}{%- endfor -%}"
    )
    parsed = TemplateSource.parse(source)
    changed = [(source[e.start : e.end], e.text) for e in empty_block_kept.edits(parsed)]
    assert changed == [
        ("rc", "(rc or message.reasoning_content is string)"),
        ("message.reasoning_content | trim | length > 0", "message.reasoning_content is string"),
    ]
