"""Each check and cause label fires on a template with that defect and stays quiet on a correct one.

The tokenizer is a tiny byte-level BPE trained in memory; the templates are in ``tests/templates.py``.
"""

from __future__ import annotations

import pytest

from tests import templates
from tests.helpers import causes, default_variant, failed, run_audit
from tito_audit.audit.results import BROKEN, READY, READY_TOOL_ONLY, UNSUPPORTED


@pytest.fixture(scope="module")
def good_report(tiny_model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "good.jinja"
    path.write_text(templates.GOOD, encoding="utf-8")
    return run_audit(tiny_model_dir, path, count=48)


def test_correct_template_is_ready_and_quiet(good_report):
    variant = default_variant(good_report)
    assert good_report.verdict == READY
    assert failed(variant, "rollout") == 0
    assert failed(variant, "append") == 0
    assert failed(variant, "bridge") == 0
    assert variant.conversations_audited == variant.conversations
    for row in variant.checks["rollout"].rows:
        assert row.passed == row.cases > 0
    assert not variant.refused
    assert not [f for f in variant.findings if f.cause == "nondeterministic-template"]


def test_correct_template_covers_every_step_kind(good_report):
    kinds = {row.category for row in default_variant(good_report).checks["rollout"].rows}
    assert kinds == {"tool", "user", "system", "assistant"}


def test_noncanonical_completions_always_fail_roundtrip(good_report):
    variant = default_variant(good_report)
    row = next(r for r in variant.checks["roundtrip"].rows if r.category == "completion (non-canonical)")
    assert row.cases > 0 and row.failed == row.cases
    canonical = next(r for r in variant.checks["roundtrip"].rows if r.category == "completion (canonical)")
    assert canonical.failed == 0
    assert "noncanonical-split" in causes(variant, "roundtrip")
    assert variant.drift.noncanonical_drift_steps > 0


def test_literal_special_tokens_in_user_text_are_reported(good_report):
    variant = default_variant(good_report)
    rows = [r for r in variant.checks["roundtrip"].rows if r.category.startswith("literal special token")]
    assert rows and sum(r.failed for r in rows) > 0
    assert "special-token-literal" in causes(variant, "roundtrip")


CASES = [
    # (template, expected verdict, check whose causes carry the label, label)
    ("EMPTY_THINK_ONLY_WHEN_LAST", BROKEN, "rollout", "empty-think-dropped"),
    ("REASONING_AFTER_LAST_USER_ONLY", READY_TOOL_ONLY, "rollout", "reasoning-pruned"),
    ("PROMPT_OPENS_THINK_HISTORY_STRIPS", BROKEN, "rollout", "gen-prompt-mismatch"),
    ("TOOL_CLOSED_DIFFERENTLY_WHEN_LAST", BROKEN, "rollout", "closing-rewritten"),
    ("STOP_TOKEN_SWAPPED_IN_HISTORY", BROKEN, "rollout", "stop-token-swap"),
    ("CONTENT_TRIMMED_IN_HISTORY", BROKEN, "rollout", "content-rewritten"),
    ("ARGUMENTS_RESERIALIZED_IN_HISTORY", BROKEN, "rollout", "tool-call-reformatted"),
    ("NEWLINE_AFTER_END_ONLY_WHEN_LAST", READY, "append", "tail-after-stop"),
    ("TOOL_HEADER_COUNTS_MESSAGES", READY, "bridge", "history-dependent-suffix"),
]


@pytest.mark.parametrize(("name", "verdict", "check", "label"), CASES, ids=[c[0] for c in CASES])
def test_defect_is_found_and_labelled(tiny_model_dir, write_template, good_report, name, verdict, check, label):
    report = run_audit(tiny_model_dir, write_template(name, getattr(templates, name)), count=48)
    variant = default_variant(report)
    assert report.verdict == verdict, variant.verdict_reason
    assert label in causes(variant, check)
    assert label not in causes(default_variant(good_report), check)
    labelled = [f for f in variant.failures if label in f.causes]
    assert labelled, "the label must come with a located failure"
    for failure in labelled:
        assert failure.conversation_id.startswith("c")
        assert failure.token_index is not None
        assert failure.expected is not None and failure.actual is not None


def test_tail_after_stop_breaks_append_but_not_rollout(tiny_model_dir, write_template):
    """docs/contract.md, "The simulated rollout": a newline the template writes after the end token only when the turn
    is last is not a defect."""
    name = "NEWLINE_AFTER_END_ONLY_WHEN_LAST"
    variant = default_variant(run_audit(tiny_model_dir, write_template(name, getattr(templates, name)), count=32))
    assert failed(variant, "append") > 0
    assert failed(variant, "rollout") == 0


def test_empty_think_breaks_only_turns_without_reasoning(tiny_model_dir, write_template):
    name = "EMPTY_THINK_ONLY_WHEN_LAST"
    variant = default_variant(run_audit(tiny_model_dir, write_template(name, getattr(templates, name)), count=48))
    tool = next(r for r in variant.checks["rollout"].rows if r.category == "tool")
    assert 0 < tool.failed < tool.cases  # steps after a turn with reasoning stay stable


def test_bpe_seam_when_text_holds_but_tokens_merge(tiny_model_dir, write_template, tiny_tokenizer):
    assert len(tiny_tokenizer.encode(" ENDING", add_special_tokens=False)) == 1
    assert len(tiny_tokenizer.encode(" END", add_special_tokens=False)) == 1
    path = write_template("seam", templates.TOOL_RESULT_MERGES_WITH_END)
    report = run_audit(tiny_model_dir, path, count=24, extra_stop_tokens=[" END"])
    variant = default_variant(report)
    assert report.verdict == BROKEN
    seam = [f for f in variant.failures if f.check == "rollout" and f.aspect == "seam"]
    assert seam and all(f.causes == ["bpe-seam"] for f in seam)
    assert not [f for f in variant.failures if f.check == "rollout" and f.aspect == "text"]
    assert any(" ENDING" in "".join(f.actual.texts) for f in seam)


def test_date_in_template_is_a_finding_not_a_verdict(tiny_model_dir, write_template):
    report = run_audit(tiny_model_dir, write_template("dated", templates.DATED_SYSTEM_PROMPT), count=8)
    variant = default_variant(report)
    assert report.verdict == READY
    assert [f for f in variant.findings if f.cause == "nondeterministic-template"]


def test_template_without_tool_role_is_unsupported_and_refusals_are_listed(tiny_model_dir, write_template):
    report = run_audit(tiny_model_dir, write_template("notool", templates.NO_TOOL_ROLE), count=24)
    variant = default_variant(report)
    assert report.verdict == UNSUPPORTED
    assert variant.refused
    assert any("no tool role" in r.reason for r in variant.refused)
    assert all(r.accepted_after is None or "tool results -> user messages" in r.accepted_after for r in variant.refused)
    # retried conversations are audited as user steps, never counted as passed tool steps
    assert all(r.category != "tool" or r.passed == 0 for r in variant.checks["rollout"].rows)


def test_variants_are_detected_and_audited(tiny_model_dir, write_template):
    source = templates.build(
        reasoning="{%- if think is defined and think is true -%}<think></think>{%- endif -%}" + templates.REASONING
    )
    report = run_audit(tiny_model_dir, write_template("variants", source), count=8)
    assert [v.name for v in report.variants] == ["default", "think=false", "think=true"]
    assert report.template_inputs == {"think": [False, True]}


def test_pinned_kwarg_is_not_varied(tiny_model_dir, write_template):
    source = templates.build(
        reasoning="{%- if think is defined and think is true -%}<think></think>{%- endif -%}" + templates.REASONING
    )
    report = run_audit(tiny_model_dir, write_template("pinned", source), count=8, pinned_kwargs={"think": True})
    assert [v.name for v in report.variants] == ["think=true"]
