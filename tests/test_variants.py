"""Template keyword arguments found from the source, and the variants built from them."""

from __future__ import annotations

import pytest

from tito_audit.model.variants import TemplateInput, check_syntax, parse_kwarg, template_inputs, variants_for


def names(source: str) -> dict[str, tuple]:
    return {i.name: i.values for i in template_inputs(source)}


def test_truth_tests_become_boolean_axes():
    assert names("{% if enable_thinking is defined and enable_thinking is false %}x{% endif %}") == {
        "enable_thinking": (False, True)
    }


def test_compared_constants_become_values():
    assert names("{% if effort == 'high' %}h{% elif effort == 'low' %}l{% endif %}") == {"effort": ("high", "low")}


def test_printed_inputs_are_listed_but_not_varied():
    inputs = template_inputs(
        "{% if date_string is not defined %}{% set date_string = '1 Jan' %}{% endif %}{{ date_string }}"
    )
    assert [(i.name, i.tested, i.values) for i in inputs] == [("date_string", False, ())]
    assert [v.name for v in variants_for(inputs)] == ["default"]


def test_internal_variables_and_standard_inputs_are_ignored():
    source = (
        "{% set ns = namespace(x=1) %}{% for m in messages %}{% set content = m.content %}{{ content }}{% endfor %}"
        "{{ bos_token }}{% if add_generation_prompt %}{{ strftime_now('%d') }}{% endif %}{% if tools %}t{% endif %}"
    )
    assert names(source) == {}


def test_lists_are_not_switched_on_and_off():
    assert names("{% if builtin_tools %}{% for t in builtin_tools %}{{ t }}{% endfor %}{% endif %}") == {
        "builtin_tools": ()
    }


def test_transformers_generation_tag_parses():
    assert check_syntax("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}") is None


def test_syntax_error_is_one_line():
    message = check_syntax("{% if x %}")
    assert message is not None and "\n" not in message and message.startswith("line 1")


def test_variants_one_axis_at_a_time_with_pins():
    inputs = [TemplateInput("a", True, (False, True)), TemplateInput("b", True, ("x",))]
    assert [v.name for v in variants_for(inputs)] == ["default", "a=false", "a=true", "b=x"]
    pinned = variants_for(inputs, {"b": "y"})
    assert [v.name for v in pinned] == ["b=y", "a=false,b=y", "a=true,b=y"]
    assert all(v.kwargs["b"] == "y" for v in pinned)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("a=true", ("a", True)), ("a=3", ("a", 3)), ("a=hello", ("a", "hello")), ('a="x=y"', ("a", "x=y"))],
)
def test_parse_kwarg(text, expected):
    assert parse_kwarg(text) == expected


@pytest.mark.parametrize("text", ["novalue", "1a=2", "a=NaN"])
def test_parse_kwarg_rejects(text):
    with pytest.raises(ValueError):
        parse_kwarg(text)


def test_switch_read_through_a_default_filter_is_a_variant():
    """``not (clear_thinking | default(true))`` tests ``clear_thinking``: both values are audited."""
    source = "{% if not (clear_thinking | default(true)) or x %}a{% endif %}{{ messages }}"
    found = {i.name: i.values for i in template_inputs(source)}
    assert found["clear_thinking"] == (False, True)


def test_settings_read_together_are_audited_together(tiny_model_dir, write_template):
    """Each setting alone keeps the buffer; thinking on with history reasoning kept does not. The combination is a
    variant of its own; an input that does not change a tool rollout (``add_vision_id``) is not combined."""
    from tests import templates
    from tests.helpers import run_audit

    report = run_audit(tiny_model_dir, write_template("together", templates.ONLY_TOGETHER), count=32)
    verdicts = {variant.name: variant.verdict for variant in report.variants}
    assert verdicts["enable_thinking=true"] == "ready" and verdicts["preserve_thinking=true"] == "ready"
    assert verdicts["enable_thinking=true,preserve_thinking=true"] == "broken"
    assert report.verdict == "broken"
    assert not any("add_vision_id" in name and "," in name for name in verdicts)
    assert {"add_vision_id=false", "add_vision_id=true"} <= set(verdicts)  # still audited one at a time


def test_a_setting_added_to_text_is_swept_over_the_strings_the_template_names():
    """Muse-Glimmer: ``'Reasoning strength: ' + rs`` through a local falling back to ``'high'`` reads a string; a
    boolean there raises, so the sweep passes the template's own string, never ``True``."""
    source = (
        "{%- set rs = strength if strength is defined and strength else 'high' -%}{{ 'Strength: ' + rs }}{{ messages }}"
    )
    assert names(source) == {"strength": ("high",)}


def test_constants_a_setting_is_compared_with_through_a_local_are_its_values():
    """Qwen3.8-like: the setting is read through ``| default`` into a local, checked against a list and compared."""
    source = (
        "{%- set effort = reasoning_effort | default('xhigh') -%}"
        "{%- if effort not in ('xhigh', 'medium', 'low') -%}{{ raise_exception('no') }}{%- endif -%}"
        "{%- if effort == 'low' -%}L{%- endif -%}{{ messages }}"
    )
    assert names(source) == {"reasoning_effort": ("low", "medium", "xhigh")}


def test_a_setting_compared_with_a_number_is_swept_on_both_sides():
    assert names("{% if budget > 0 %}b{% endif %}{{ messages }}") == {"budget": (0, 1)}


def test_an_integer_with_a_default_of_its_own_is_swept_at_it_and_its_neighbours():
    """Laguna-S-2.1-RFA_L and XMB480-Qwen3.6: a limit the template falls back to 0 (off) and compares ``> 0`` is swept
    at 0 alone (one past the threshold, 1, would cut every tool result to one character: an edge no harness sets); a
    count with its own default of 6 at 0 and 6; a budget with named gears at the default's neighbours among them."""
    limit = (
        "{%- set cap = cap if cap is defined else 0 -%}"
        "{%- for m in messages -%}{%- if cap > 0 and m.content | length > cap -%}{{ m.content[:cap] }}"
        "{%- else -%}{{ m.content }}{%- endif -%}{%- endfor -%}"
    )
    assert names(limit) == {"cap": (0,)}
    count = "{%- set after = after if after is defined else 6 -%}{% if after > 0 %}n{% endif %}{{ messages }}"
    assert names(count) == {"after": (0, 6)}
    gears = (
        "{%- set budget = budget | default(4096) -%}{% if budget == 512 or budget == 1024 %}s{% endif %}"
        "{% if budget >= 8192 %}l{% endif %}{% if budget == 0 %}o{% endif %}{{ messages }}"
    )
    assert names(gears) == {"budget": (1024, 4096, 8192)}


def test_a_truth_tested_setting_stays_boolean():
    assert names("{% set on = thinking if thinking is defined else false %}{% if on %}t{% endif %}") == {
        "thinking": (False, True)
    }


def test_a_setting_the_template_refuses_is_reported_and_decides_no_verdict(tiny_model_dir, write_template):
    """A value the template raises on (here ``flag=true``) is a refused setting: listed with what the template
    raised, not audited, and the model's verdict is that of the settings it takes."""
    from tests import templates
    from tests.helpers import run_audit

    source = "{%- if flag -%}{{ raise_exception('flag is not supported') }}{%- endif -%}" + templates.GOOD
    report = run_audit(tiny_model_dir, write_template("refuses", source), count=16)
    assert [item.setting for item in report.refused_settings] == ["flag=true"]
    assert "flag is not supported" in report.refused_settings[0].error
    assert "flag=true" not in {variant.name for variant in report.variants}
    assert report.verdict == "ready"
    from tito_audit.formatters.markdown import to_markdown

    assert "refused setting flag=true (not audited; decides no verdict): " in to_markdown(report)
