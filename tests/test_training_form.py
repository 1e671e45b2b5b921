"""Training forms: the way out's template with generation blocks around what the model samples, offered only when it
renders as the serving form does and its mask trains every turn as sampled.

What a turn's mask must hold is read from the toy templates: after the header ``<|im_start|>assistant\\n`` the
generation prompt writes, the model samples its text through ``<|im_end|>``; the newline after it is the template's.
"""

from __future__ import annotations

import pytest

from tests import templates
from tests.helpers import load
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.formatters.fix_report import page_of, to_markdown
from tito_audit.model.load_folder import LoadedModel
from tito_audit.repair.training_form import TrainingForm, training_form, verify
from tito_audit.repair.training_wrap import WrapError, wrap
from tito_audit.repair.way_out import FIX, SETTING, find_way_out

OPTIONS = AuditOptions(count=16)
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
ROLLOUT = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "Sunny."},
    {"role": "assistant", "content": "It is sunny."},
]
SAMPLED = ['<tool_call>get_weather {"city": "Oslo"}</tool_call><|im_end|>', "It is sunny.<|im_end|>"]
"""What the model samples in ROLLOUT's two turns under the skeleton of tests/templates.py (read from it)."""

SET_IN_BRANCH = (
    "{%- for m in messages -%}{%- if m.role == 'assistant' -%}<|im_start|>assistant"
    + templates.NL
    + "{{ m.content }}<|im_end|>{%- set closing = '\\n' -%}{%- else -%}<|im_start|>{{ m.role }}"
    + templates.NL
    + "{{ m.content }}<|im_end|>{%- set closing = '\\n' -%}{%- endif -%}{{ closing }}{%- endfor -%}"
    + templates.GEN
)
"""A variable set in the assistant branch and read after it: captured, the branch's assignment stays inside the
capture, so a wrapped form would lose the newline after every assistant turn."""


def _trained(model: LoadedModel, source: str, messages: list[dict]) -> list[str]:
    """The runs of text the training form's mask marks, computed with transformers directly."""
    out = model.tokenizer.apply_chat_template(
        messages, chat_template=source, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    runs: list[list[int]] = []
    for position, (token, bit) in enumerate(zip(out["input_ids"], out["assistant_masks"], strict=True)):
        if bit:
            if not runs or not out["assistant_masks"][position - 1]:
                runs.append([])
            runs[-1].append(token)
    return [model.tokenizer.decode(run) for run in runs]


def _form(tiny_model_dir, write_template, name: str, source: str, **options) -> tuple[LoadedModel, TrainingForm]:
    model = load(tiny_model_dir, write_template(name, source))
    settings = AuditOptions(count=16, **options)
    return model, training_form(model, source, audit(model, settings), settings, audit)


SHARED_BRANCH = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}"
    + templates.NL
    + templates.CONTENT
    + templates.CALLS
    + templates.END
    + "{%- endfor -%}"
    + templates.GEN
)
"""Every role written by one branch (as Llama 3 does): the loop's body is captured, assistant messages split."""


@pytest.mark.parametrize(
    ("name", "sampled"),
    [
        ("GOOD", SAMPLED),
        ("SHARED_BRANCH", SAMPLED),
        ("MASK_HEADER_INSIDE", SAMPLED),
        ("PARALLEL_CALLS_JOINED", SAMPLED),
        # the last turn gets an empty think block the prompt does not write: the model wrote it (F after P)
        ("MULTILINE_EMPTY_THINK", [SAMPLED[0], "<think>\n\n</think>\n\n" + SAMPLED[1]]),
    ],
)
def test_the_training_form_marks_what_the_model_samples_and_renders_as_the_serving_form(
    tiny_model_dir, write_template, name, sampled
):
    source = SHARED_BRANCH if name == "SHARED_BRANCH" else getattr(templates, name)
    model, form = _form(tiny_model_dir, write_template, name.lower(), source)
    assert form.offered, form.reason
    assert form.renders > 0 and form.turns > 0
    assert form.source is not None and "{%- generation -%}" in form.source
    assert _trained(model, form.source, ROLLOUT) == sampled
    text = model.tokenizer.apply_chat_template(ROLLOUT, tokenize=False, chat_template=form.source)
    assert text == model.tokenizer.apply_chat_template(ROLLOUT, tokenize=False, chat_template=source)


def test_a_prompt_that_opens_the_reasoning_block_leaves_the_opener_out(tiny_model_dir, write_template):
    """QWQ_LIKE's prompt writes ``<think>\\n``; history renders no reasoning: the model sampled the turn after the
    prompt, so the header is left out of the mask and the text after it is trained."""
    model, form = _form(tiny_model_dir, write_template, "switch", templates.PROMPT_OPENS_THINK_HISTORY_ALWAYS_BLOCK)
    assert form.offered, form.reason
    turn = [{"role": "user", "content": "Hi"}, {"role": "assistant", "reasoning_content": "R", "content": "A"}]
    assert form.source is not None and _trained(model, form.source, turn) == ["R\n</think>\nA<|im_end|>"]


def test_a_stop_token_the_template_writes_in_the_next_message_cannot_be_trained(tiny_model_dir, write_template):
    _, form = _form(
        tiny_model_dir, write_template, "noend", templates.NO_END_OF_TURN, extra_stop_tokens=["<|im_start|>"]
    )
    assert not form.offered and "stop-token-untrained" in form.reason


def test_a_form_that_renders_differently_is_not_offered_and_the_whole_message_is_tried(tiny_model_dir, write_template):
    """SET_IN_BRANCH sets ``closing`` in its assistant branch and reads it after: the branch captured, the newline is
    lost (refused, with where); the loop's body captured, the variable stays in the capture and the form holds."""
    model = load(tiny_model_dir, write_template("set_in_branch", SET_IN_BRANCH))
    report = audit(model, OPTIONS)
    branch = verify(model, SET_IN_BRANCH, report, OPTIONS, audit, whole_messages=False)
    assert not branch.offered and branch.reason.startswith("it does not render as the serving form does (c")
    form = training_form(model, SET_IN_BRANCH, report, OPTIONS, audit)
    assert form.offered, form.reason
    assert form.source is not None and _trained(model, form.source, ROLLOUT) == ["<|im_end|>", "It is sunny.<|im_end|>"]


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (templates.GOOD.replace(templates.GEN, ""), "no {% if add_generation_prompt %} section"),
        ("{{ messages[-1].content }}" + templates.GEN, "no loop over the messages writes them"),
    ],
)
def test_templates_without_the_constructs_are_refused_with_the_reason(source, reason):
    with pytest.raises(WrapError) as raised:
        wrap(source, ["<|im_end|>"])
    assert reason in str(raised.value)


def test_a_way_out_comes_with_its_training_form_and_says_where_each_form_goes(tiny_model_dir, write_template):
    for name, kind in (("MULTILINE_EMPTY_THINK", FIX), ("PRESERVE_THINKING_SWITCH", SETTING)):
        model = load(tiny_model_dir, write_template(name.lower(), getattr(templates, name)))
        before = audit(model, OPTIONS)
        way = find_way_out(model, before, OPTIONS, audit)
        assert way.kind == kind and way.training is not None and way.training.offered, way.training
        serving = way.fix.patched_source if kind == FIX and way.fix is not None else getattr(templates, name)
        assert way.training.source is not None
        text = model.tokenizer.apply_chat_template(ROLLOUT, tokenize=False, chat_template=way.training.source)
        assert text == model.tokenizer.apply_chat_template(ROLLOUT, tokenize=False, chat_template=serving)
        page = page_of(way, before)
        markdown = to_markdown(before, page, None, "x.training.diff")
        assert "## Training form" in markdown and "return_assistant_tokens_mask=True" in markdown
        if name == "MULTILINE_EMPTY_THINK":
            assert "[x.training.diff](x.training.diff)" in markdown
            assert page.training_diff is not None and page.training_diff.startswith("--- a/chat_template.jinja")
        else:  # a template on one line: its diff would quote it whole
            assert page.training_diff is None and "training form's diff is not published" in markdown


def test_patch_refuses_a_training_file_that_is_the_serving_form(tiny_model_dir, write_template, tmp_path):
    from tests.test_cli import run_cli

    path = write_template("ml", templates.MULTILINE_EMPTY_THINK)
    out = tmp_path / "fixed.jinja"
    result = run_cli("patch", str(tiny_model_dir), "--template", str(path), "-o", str(out), "--training", str(out))
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.strip().count("\n") == 0 and "--training" in result.stderr and "Traceback" not in result.stderr
