"""`explain` points at the template lines behind a divergence; `patch` fixes what it claims and nothing else."""

from __future__ import annotations

import json

import pytest

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import load, run_audit
from tests.test_cli import run_cli
from tito_audit.model.attribution import TemplateAttributor
from tito_audit.model.tokens import TokenCodec
from tito_audit.repair.explain import Explainer, numbered_failures


def test_attribution_covers_every_character_and_matches_the_render(tiny_model_dir, write_template):
    model = load(tiny_model_dir, write_template("ml", templates.MULTILINE_EMPTY_THINK))
    attributor = TemplateAttributor(model.template_source)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    expected = model.tokenizer.apply_chat_template(messages, chat_template=model.template_source, tokenize=False)
    rendered = attributor.render(messages, None, False, model.tokenizer.special_tokens_map, expected)
    assert rendered is not None and rendered.text == expected
    think = expected.index("<think>")
    assert rendered.lines_at(think) == [7]
    assert attributor.conditions(7)[-1] == 6
    assert "loop.last" in attributor.line(6).reads
    assert rendered.lines_at(expected.index("yo")) == [9]


def test_explain_names_the_gating_line(tiny_model_dir, write_template):
    path = write_template("ml", templates.MULTILINE_EMPTY_THINK)
    report = run_audit(tiny_model_dir, path, count=16)
    model = load(tiny_model_dir, path)
    cases = numbered_failures(report)
    number, variant, failure = next(
        c for c in cases if "empty-think-dropped" in c[2].causes and c[2].check == "rollout"
    )
    explanation = Explainer(model, TokenCodec(model.tokenizer), report).explain(number, variant, failure)
    earlier = next(s for s in explanation.sides if s.side == "earlier")
    assert [line.number for line in earlier.lines if line.number in (6, 7)] == [6, 7]
    confirmation = next(c for c in explanation.confirmations if c.cause == "empty-think-dropped")
    assert confirmation.confirmed


def test_explain_cli_json_and_case(tiny_model_dir, write_template, tmp_path):
    path = write_template("ml", templates.MULTILINE_EMPTY_THINK)
    out = tmp_path / "explain.json"
    result = run_cli("explain", str(tiny_model_dir), "--template", str(path), "-n", "12", "--json", str(out))
    assert result.returncode == 1, result.stderr
    document = json.loads(out.read_text())
    assert "empty-think-dropped" in document["causes"]
    first = document["causes"]["empty-think-dropped"][0]
    single = run_cli("explain", str(tiny_model_dir), "--template", str(path), "-n", "12", "--case", str(first))
    assert "case " + str(first) in single.stdout and "loop.last" in single.stdout
    bad = run_cli("explain", str(tiny_model_dir), "--template", str(path), "-n", "12", "--case", "99999")
    assert bad.returncode == 2 and "failing cases" in bad.stderr


def test_patch_fixes_position_gated_think_and_changes_nothing_else(tiny_model_dir, write_template, tmp_path):
    path = write_template("ml", templates.MULTILINE_EMPTY_THINK)
    out = tmp_path / "fixed.jinja"
    result = run_cli("patch", str(tiny_model_dir), "--template", str(path), "-n", "24", "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no-change proof holds" in result.stdout
    patched = out.read_text()
    # the fix makes the gate always true; folded, that reads as a plain else (issue 21: fixes a person would write)
    assert "{%- else %}" in patched and patched.count("\n") == templates.MULTILINE_EMPTY_THINK.count("\n")
    diff = (tmp_path / "fixed.jinja.diff").read_text()
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ["-{%- elif loop.last %}", "+{%- else %}"]
    assert run_audit(tiny_model_dir, out, count=24).verdict == "ready"


def test_patch_freezes_the_date(tiny_model_dir, write_template, tmp_path):
    path = write_template("dated", templates.MULTILINE_DATED)
    before = run_audit(tiny_model_dir, path, count=6)
    assert [f.cause for f in before.variants[0].findings] == ["nondeterministic-template"]
    out = tmp_path / "frozen.jinja"
    result = run_cli("patch", str(tiny_model_dir), "--template", str(path), "-n", "6", "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "strftime_now" not in out.read_text() and "frozen_date" in out.read_text()
    assert not run_audit(tiny_model_dir, out, count=6).variants[0].findings


@pytest.mark.parametrize("name", ["GOOD", "PROMPT_CLOSES_THINK_HISTORY_NEVER_SHOWS"])
def test_patch_refuses_without_a_known_fix(tiny_model_dir, write_template, tmp_path, name):
    result = run_cli(
        "patch",
        str(tiny_model_dir),
        "--template",
        str(write_template(name, getattr(templates, name))),
        "-n",
        "12",
        "-o",
        str(tmp_path / "x.jinja"),
    )
    assert result.returncode == 1
    assert "no known mechanical fix applies" in result.stdout
    assert not (tmp_path / "x.jinja").exists()
    if name != "GOOD":
        assert "not fixed empty-think-dropped" in result.stdout


@requires_shared
def test_qwen3_patch_is_ready_where_it_can_be(tmp_path):
    if not (SHARED_TOKENIZERS / "Qwen--Qwen3-4B").is_dir():
        pytest.skip("Qwen3-4B is not in ../shared/tokenizers")
    out = tmp_path / "qwen3.jinja"
    # the template alone (--parser template): with SGLang's parsers the loop stays broken (tests/test_exit_rule.py)
    result = run_cli(
        "patch", "Qwen/Qwen3-4B", "--mirror", str(SHARED_TOKENIZERS), "-n", "24", "--parser", "template", "-o", str(out)
    )
    assert "no-change proof holds" in result.stdout
    from tito_audit.audit.service import AuditOptions, audit
    from tito_audit.model.load_folder import load_model
    from tito_audit.model.resolve import resolve_model

    model = load_model(resolve_model("Qwen/Qwen3-4B", mirrors=[SHARED_TOKENIZERS], allow_hub=False), template_file=out)
    verdicts = {v.name: v.verdict for v in audit(model, AuditOptions(count=24)).variants}
    # history renders every assistant turn as the last one: the empty think block of enable_thinking=false
    # (what that prompt writes) stays, and so does reasoning before a later user message
    assert verdicts == {"default": "ready", "enable_thinking=false": "ready", "enable_thinking=true": "ready"}
    assert result.returncode == 0 and "not fixed" not in result.stdout


def test_explanations_read_what_the_audit_walked_and_run_nothing_of_it_again(
    tiny_model_dir, write_template, monkeypatch
):
    """The explainer builds on the conversation each failure keeps (issue 47): generating or realizing a conversation
    again during the explanation would raise here."""
    import tito_audit.repair.explain as explain_module

    path = write_template("ml", templates.MULTILINE_EMPTY_THINK)
    report = run_audit(tiny_model_dir, path, count=16)
    model = load(tiny_model_dir, path)

    def again(*args, **kwargs):
        raise AssertionError("the explanation ran the audit again")

    for name in ("realize", "generate_conversation", "audited_rollout"):
        monkeypatch.setattr(explain_module, name, again, raising=False)
    number, variant, failure = next(c for c in numbered_failures(report) if c[2].check == "rollout")
    assert failure.walked is not None
    explanation = Explainer(model, TokenCodec(model.tokenizer), report).explain(number, variant, failure)
    assert explanation.sides and all(c.confirmed for c in explanation.confirmations)
