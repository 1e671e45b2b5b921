"""The placed training form: ``{% generation %}`` … ``{% endgeneration %}`` in the template's own assistant branches,
offered when it marks exactly what the computed form marks; the computed form, without constant branches, where no
place does, and the page saying which form a row got and why.

What a turn's mask holds is read from the toy templates (as in tests/test_training_form.py): after the header
``<|im_start|>assistant\\n`` the generation prompt writes, the model samples its text through ``<|im_end|>``.
"""

from __future__ import annotations

import re

from jinja2 import Environment

from tests import templates
from tests.test_training_form import ROLLOUT, SAMPLED, SHARED_BRANCH, _form, _trained
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.formatters.fix_report import page_of, to_markdown
from tito_audit.repair.fixes.source import TemplateSource
from tito_audit.repair.training_form import COMPUTED, PLACED
from tito_audit.repair.training_points import INSIDE_LITERAL, points_of
from tito_audit.repair.training_wrap import wrap
from tito_audit.repair.way_out import SETTING, WayOut

GENERATION_TAG = re.compile(r"\{%-? (end)?generation -?%\}")

ONE_OUTPUT = """{%- for m in messages %}
{%- if m.role == 'assistant' %}
    {%- set calls = namespace(text='') %}
    {%- for c in m.tool_calls or [] %}
        {%- set args = c.function.arguments if c.function.arguments is string else c.function.arguments | tojson %}
        {%- set calls.text = calls.text + '<tool_call>' + c.function.name + ' ' + args + '</tool_call>' %}
    {%- endfor %}
    {{- '<|im_start|>assistant\\n' + (m.content if m.content is string else '') + calls.text + '<|im_end|>\\n' }}
{%- elif m.role == 'tool' %}
    {{- '<|im_start|>tool\\n' + m.content + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}"""
"""The whole assistant turn in one output: the header the prompt writes, what the model samples and the newline after
``<|im_end|>``, joined by ``+``."""

ONE_OUTPUT_PLACED = """    {{- '<|im_start|>assistant\\n' }}
    {%- generation -%}
    {{- (m.content if m.content is string else '') + calls.text + '<|im_end|>' }}
    {%- endgeneration -%}
    {{- '\\n' }}
"""
"""ONE_OUTPUT's turn with the block around what the model samples: the output split in three, on lines of their own
at its indentation (written by hand from the rule in tito_audit/repair/training_points.py)."""

NOTE_SETTING = templates.build(
    reasoning="<note>" + templates.NL,
    gen="{%- if add_generation_prompt -%}<|im_start|>assistant"
    + templates.NL
    + "{%- if note is true -%}<note>"
    + templates.NL
    + "{%- endif -%}{%- endif -%}",
)
"""History writes ``<note>\\n`` after every assistant header; the prompt writes it only with ``note=true``: the
sampled text begins before it by default and after it under ``note=true``, so no one place of the branch is where it
begins."""

THINKING_SWITCH = templates.build(
    reasoning="<think>" + templates.NL + "{{ m.reasoning_content or '' }}" + templates.NL + "</think>" + templates.NL,
    gen="{%- if add_generation_prompt -%}<|im_start|>assistant"
    + templates.NL
    + "{%- if enable_thinking is false -%}<think>"
    + templates.NL
    + "</think>"
    + templates.NL
    + "{%- endif -%}{%- endif -%}",
)
"""Qwen3-like: the prompt closes an empty reasoning block under ``enable_thinking=false``."""


def _without_blocks(source: str) -> str:
    return GENERATION_TAG.sub("", source)


def test_the_block_is_placed_in_the_assistant_branch_around_what_the_model_samples(tiny_model_dir, write_template):
    model, form = _form(tiny_model_dir, write_template, "good", templates.GOOD)
    assert form.offered and form.form == PLACED, form.reason
    assert form.source is not None and "tito_" not in form.source
    # the template's own text with one block added, and nothing else
    assert _without_blocks(form.source) == templates.GOOD and len(GENERATION_TAG.findall(form.source)) == 2
    assert _trained(model, form.source, ROLLOUT) == SAMPLED
    computed = wrap(templates.GOOD, ["<|im_end|>"])
    assert _trained(model, form.source, ROLLOUT) == _trained(model, computed, ROLLOUT)
    assert form.placement().startswith("placed in the template's own assistant branch (generation block at line 1")


def test_a_template_s_own_block_is_moved_where_the_model_samples(tiny_model_dir, write_template):
    """MASK_TAIL_INSIDE's block holds the newline after ``<|im_end|>``: the placed form keeps the template's text and
    closes the block before it."""
    model, form = _form(tiny_model_dir, write_template, "tail", templates.MASK_TAIL_INSIDE)
    assert form.offered and form.form == PLACED, form.reason
    assert form.source is not None and _without_blocks(form.source) == _without_blocks(templates.MASK_TAIL_INSIDE)
    assert _trained(model, form.source, ROLLOUT) == SAMPLED


def test_an_output_that_writes_the_whole_turn_is_split_around_the_sampled_part(tiny_model_dir, write_template):
    model, form = _form(tiny_model_dir, write_template, "one_output", ONE_OUTPUT)
    assert form.offered and form.form == PLACED, form.reason
    turn = next(line for line in ONE_OUTPUT.splitlines(keepends=True) if "'<|im_start|>assistant\\n' +" in line)
    assert form.source == ONE_OUTPUT.replace(turn, ONE_OUTPUT_PLACED)
    assert _trained(model, form.source, ROLLOUT) == SAMPLED


def test_where_the_sampled_text_begins_depends_on_a_setting_the_form_is_computed(tiny_model_dir, write_template):
    _, form = _form(tiny_model_dir, write_template, "note", NOTE_SETTING)
    assert form.offered and form.form == COMPUTED, form.reason
    assert form.why_computed.startswith(
        "where the sampled text begins in the assistant branch at line 1 depends on the settings ("
    )
    assert "note=true: after `" in form.why_computed and "<note>\\n`" in form.why_computed
    assert form.placement().startswith("computed: each assistant turn is captured") and form.why_computed in (
        form.placement()
    )


def test_the_computed_form_has_no_constant_branch(tiny_model_dir, write_template):
    """The generation prompt's copy is captured as the template writes it: no ``{% if true %}`` left from the
    ``{% if add_generation_prompt %}`` it was copied from."""
    model, form = _form(tiny_model_dir, write_template, "switch", THINKING_SWITCH)
    assert form.offered and form.form == COMPUTED, form.reason
    assert form.source is not None and "if true" not in form.source
    assert "{% set tito_prompt -%}<|im_start|>assistant{{ '\\n' }}{%- if enable_thinking is false -%}" in form.source
    # the mask still starts where the turn stops sharing the prompt: after the header by default
    turn = [{"role": "user", "content": "Hi"}, {"role": "assistant", "reasoning_content": "R", "content": "A"}]
    assert _trained(model, form.source, turn) == ["<think>\nR\n</think>\nA<|im_end|>"]


LINED_SWITCH = """{%- for m in messages %}
{%- if m.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if m.reasoning_content %}
{{- '<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' }}
{%- endif %}
{{- m.content + '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- if enable_thinking is false %}
{{- '<think>\\n\\n</think>\\n\\n' }}
{%- endif %}
{%- endif %}"""
"""THINKING_SWITCH a statement a line, as Qwen3 and Seed-OSS write theirs: the generation prompt's section ends in
an ``{%- endif %}`` on the line after another (no constant branch around its copy could be folded away)."""


def test_a_generation_prompt_written_a_statement_a_line_is_copied_without_a_constant_branch(
    tiny_model_dir, write_template
):
    model, form = _form(tiny_model_dir, write_template, "lined", LINED_SWITCH)
    assert form.offered and form.form == COMPUTED, form.reason
    assert form.source is not None and "if true" not in form.source
    section = LINED_SWITCH[LINED_SWITCH.index("{%- if add_generation_prompt %}") :]
    body = section.removeprefix("{%- if add_generation_prompt %}\n").removesuffix("\n{%- endif %}")
    assert "{% set tito_prompt %}\n" + body + "\n{%- endset %}" in form.source
    turn = [{"role": "user", "content": "Hi"}, {"role": "assistant", "reasoning_content": "R", "content": "A"}]
    assert _trained(model, form.source, turn) == ["<think>\nR\n</think>\n\nA<|im_end|>"]


def test_a_branch_shared_with_other_roles_gets_the_computed_form_and_says_why(tiny_model_dir, write_template):
    _, form = _form(tiny_model_dir, write_template, "shared", SHARED_BRANCH)
    assert form.offered and form.form == COMPUTED, form.reason
    assert form.why_computed == "the template writes assistant messages in branches it shares with other roles"


def test_the_fix_page_says_which_form_the_row_got_and_why(tiny_model_dir, write_template):
    for name, source in (("good", templates.GOOD), ("note", NOTE_SETTING)):
        model, form = _form(tiny_model_dir, write_template, name, source)
        report = audit(model, AuditOptions(count=16))
        page = page_of(WayOut(SETTING, "default settings → ready", training=form), report)
        markdown = to_markdown(report, page, None, None)
        if name == "good":
            assert "Form: placed in the template's own assistant branch (generation block at line 1" in markdown
        else:
            assert "Form: computed: each assistant turn is captured" in markdown
            assert "because no placed form verifies: where the sampled text begins" in markdown


def test_a_literal_is_cut_only_between_the_characters_it_writes():
    """``'x\\u00e9\\ny'`` writes four characters: three places inside it, each rendering the same text with the
    marker after the first, second and third character (an escape is never cut)."""
    source = (
        "{%- for m in messages -%}{%- if m.role == 'assistant' -%}{{ 'x\\u00e9\\ny' + m.content }}"
        "{%- endif -%}{%- endfor -%}"
    )
    template = TemplateSource.parse(source)
    start = source.index("{{")
    inside = [p for p in points_of(template, [(start, source.index("{%- endif"))]) if p.rank == INSIDE_LITERAL]
    environment = Environment(trim_blocks=True, lstrip_blocks=True)
    rendered = []
    for point in inside:
        marked = source[: point.start] + point.marker("|") + source[point.end :]
        rendered.append(environment.from_string(marked).render(messages=[{"role": "assistant", "content": "!"}]))
    assert rendered == ["x|é\ny!", "xé|\ny!", "xé\n|y!"]


def test_only_a_chain_of_concatenations_is_split():
    for expression, operands in (("'a' + b ~ c", 2), ("a - 'b'", 0), ("'a' if c else 'b'", 0), ("'a' ~ (b or c)", 1)):
        source = "{%- for m in messages -%}{%- if m.role == 'assistant' -%}{{ " + expression + " }}{%- endif -%}"
        source += "{%- endfor -%}"
        template = TemplateSource.parse(source)
        found = points_of(template, [(source.index("{{"), source.index("{%- endif"))])
        assert len([p for p in found if p.rank == 1]) == operands, expression
