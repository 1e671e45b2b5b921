"""Written values (docs/contract.md "Written values"): argument values a model writes in the template's literal or in
JSON's, through the parser into the next prompt, as rates per value type beside the verdict; a template writing non-JSON
literals is a finding naming its line; ``--tools`` makes the generated conversations call the user's tools."""

from __future__ import annotations

import json
import re

import pytest

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import default_variant, run_audit, shared_model
from tests.test_cli import run_cli
from tito_audit.formatters.parse_lines import beside_the_verdict
from tito_audit.parse import sglang

SHARED_TEMPLATES = SHARED_TOKENIZERS.parent / "templates"
needs_sglang = pytest.mark.skipif(not sglang.available(), reason="SGLang's parsers (extra 'sglang') are not installed")

PYTHON_LITERALS = """{%- for m in messages -%}
{%- if m.role == 'assistant' -%}<|im_start|>assistant
{{ m.content or '' }}
{%- for c in m.tool_calls or [] -%}<tool_call>{{ c.function.name }}
{%- for name, value in c.function.arguments | items -%}
{%- set value = value if value is string else value | string %} {{ name }}={{ value }}
{%- endfor -%}</tool_call>{%- endfor -%}<|im_end|>
{% else -%}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}"""
"""Qwen3-Coder-like: each argument written ``name=value``, a non-string one with ``| string`` (``False``, ``None``)."""


def _line_of(source: str, needle: str) -> int:
    return next(number for number, line in enumerate(source.splitlines(), start=1) if needle in line)


def test_a_json_literal_where_the_template_writes_python_is_value_rewritten(tiny_model_dir, write_template):
    variant = default_variant(run_audit(tiny_model_dir, write_template("python", PYTHON_LITERALS), count=96))
    values = {value.value_type: value for value in variant.values}
    boolean, null = values["boolean"], values["null"]
    assert (boolean.template_literal, boolean.json_literal) in {("False", "false"), ("True", "true")}
    assert boolean.steps > 0 and boolean.differing == boolean.steps  # the perfect inverse re-renders its own literal
    assert null.template_literal == "None" and null.json_literal == "null" and null.differing == null.steps > 0
    assert boolean.values_changed == 0, "the perfect inverse reads every value back as written"
    example = next(f for f in variant.value_failures if f.category == "boolean")
    assert example.causes == ["value-rewritten"]
    assert boolean.json_literal in example.expected_text and boolean.template_literal in example.actual_text
    finding = next(f for f in variant.findings if f.cause == "value-rewritten")
    assert "boolean false as False" in finding.summary and "null as None" in finding.summary
    assert f"template line {_line_of(PYTHON_LITERALS, '| string')}:" in finding.evidence
    assert variant.verdict == "ready", "another literal is a rate beside the verdict, never in it"
    examples = [line for line in beside_the_verdict(variant) if line.startswith("e.g. ")]
    assert len([f for f in variant.value_failures if f.category == "boolean"]) > 1
    types = [line.split(":")[0].removeprefix("e.g. ") for line in examples]
    assert len(types) == len(set(types)) and {"boolean", "null"} <= set(types), "one example per value type"


def _example_windows(variant, value_type: str) -> tuple[str, str]:
    """The buffer and next-prompt windows of the first example line of ``value_type`` as every format prints it."""
    line = next(line for line in beside_the_verdict(variant) if line.startswith(f"e.g. {value_type}:"))
    match = re.search(r"buffer …(['\"])(.*)\1… / next prompt …(['\"])(.*)\3…$", line)
    assert match is not None, line
    return match.group(2), match.group(4)


def test_each_value_example_shows_where_the_two_texts_part(tiny_model_dir, write_template):
    variant = default_variant(run_audit(tiny_model_dir, write_template("python", PYTHON_LITERALS), count=96))
    for value in variant.values:
        if not value.differing:
            continue
        buffer, prompt = _example_windows(variant, value.value_type)
        assert buffer != prompt, "the two windows read the same: the difference lies outside them"
        if value.value_type in ("boolean", "null"):  # short literals: each window shows its own whole
            assert value.json_literal in buffer and value.template_literal in prompt


def test_a_template_writing_json_has_no_value_to_rewrite(tiny_model_dir, write_template):
    variant = default_variant(run_audit(tiny_model_dir, write_template("good", templates.GOOD), count=48))
    values = {value.value_type: value for value in variant.values}
    assert values["boolean"].values > 0 and values["boolean"].steps == 0
    assert values["null"].values > 0 and values["null"].steps == 0
    assert not any(f.cause == "value-rewritten" for f in variant.findings)


@requires_shared
@needs_sglang
def test_qwen35_rewrites_json_booleans_and_reads_none_back_as_a_string():
    from tito_audit.audit.service import AuditOptions, audit

    model = shared_model("Qwen/Qwen3.5-0.8B")
    variant = default_variant(audit(model, AuditOptions(count=48, parser="sglang")))
    values = {value.value_type: value for value in variant.values}
    assert values["boolean"].steps > 0 and values["boolean"].differing == values["boolean"].steps
    # qwen3_coder reads the template's own None as the string "None" (the tokens hold, the value does not)
    assert values["null"].values > 0 and values["null"].values_changed == values["null"].values
    source = (SHARED_TOKENIZERS / "Qwen--Qwen3.5-0.8B" / "chat_template.jinja").read_text(encoding="utf-8")
    finding = next(f for f in variant.findings if f.cause == "value-rewritten")
    assert f"template line {_line_of(source, 'else args_value | string')}:" in finding.evidence
    buffer, prompt = _example_windows(variant, "boolean")  # the published example read the same on both sides
    assert values["boolean"].json_literal in buffer and values["boolean"].template_literal in prompt


@requires_shared
def test_qwen36_writes_json_literals():
    from tito_audit.audit.service import AuditOptions, audit

    model = shared_model("Qwen/Qwen3.6-35B-A3B")
    variant = default_variant(audit(model, AuditOptions(count=48, parser="template")))
    values = {value.value_type: value for value in variant.values}
    assert values["boolean"].values > 0 and values["boolean"].steps == 0
    assert not any(f.cause == "value-rewritten" for f in variant.findings)


BOOLEAN_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "set_alarm",
            "description": "Set an alarm.",
            "parameters": {"type": "object", "properties": {"enabled": {"type": "boolean"}}, "required": ["enabled"]},
        },
    }
]


@requires_shared
def test_tools_file_makes_the_conversations_call_those_tools(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(BOOLEAN_TOOL), encoding="utf-8")
    out = tmp_path / "report.json"
    args = ["audit", "Qwen/Qwen3.5-0.8B", "--mirror", str(SHARED_TOKENIZERS), "--no-hub", "-n", "24"]
    result = run_cli(*args, "--tools", str(tools), "--json", str(out), "--parser", "template")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["settings"]["tools"] == ["set_alarm"] and report["settings"]["tools_source"] == str(tools)
    boolean = next(v for v in report["variants"][0]["values"] if v["value_type"] == "boolean")
    assert boolean["steps"] > 0 and boolean["differing"] == boolean["steps"]
    example = next(f for f in report["variants"][0]["value_failures"] if f["category"] == "boolean")
    assert "<function=set_alarm>" in example["expected_text"] + example["actual_text"]
    assert "boolean values written" in result.stdout and "template line" in result.stdout
    assert re.search(r"tools\s+set_alarm \(from ", result.stdout), "the report says which tools were called"


def test_a_tools_file_whose_schema_cannot_be_drawn_is_one_line(tiny_model_dir, tmp_path):
    tools = tmp_path / "tools.json"
    bad = [{"type": "function", "function": {"name": "odd", "parameters": {"type": "object", "not": {}}}}]
    tools.write_text(json.dumps(bad), encoding="utf-8")
    result = run_cli("audit", str(tiny_model_dir), "--tools", str(tools), "-n", "2", "--parser", "template")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--tools" in lines[0] and "odd" in lines[0] and "not" in lines[0]
    assert "Traceback" not in result.stderr
