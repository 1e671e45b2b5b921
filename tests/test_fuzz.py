"""Fuzzing the library and the command line with malformed conversations and templates.

Whatever comes in: no uncaught exception, every failure is a documented error (AuditError, exit code 2
with one line), and nothing is written outside the requested outputs."""

from __future__ import annotations

import math
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import templates
from tests.helpers import load
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.conversations.conversation import Conversation
from tito_audit.errors import AuditError

FRAGMENTS = [
    "{% for m in messages %}",
    "{% endfor %}",
    "{{ m.content }}",
    "{{ m.role }}",
    "<|im_start|>",
    "<|im_end|>",
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{{ raise_exception('nope') }}",
    "{{ m.tool_calls | tojson }}",
    "{{ messages[7].content }}",
    "{{ tools | length }}",
    "{% if loop.last %}",
    "{% endif %}",
    "{{ m.reasoning_content }}",
    "{{ ''.__class__.__mro__ }}",
    "{% set x = m.content.split('x') %}",
    "{{ x[-1] }}",
    "{%",
    "}}",
    "{{ m.content | trim }}",
    "{% for i in range(5) %}{{ i }}{% endfor %}",
    "{{ strftime_now('%Y') }}",
    "{{ m.content[1000:] }}",
    "{{ 1 / 0 }}",
    "{{ bos_token }}",
    "\n",
]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20)
)
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
roles = st.sampled_from(["system", "user", "assistant", "tool", "robot", "", None, 3])
messages = st.dictionaries(
    st.sampled_from(["role", "content", "tool_calls", "reasoning_content", "name", "tool_call_id"]),
    st.one_of(
        roles,
        json_like,
        st.lists(
            st.fixed_dictionaries(
                {"function": st.fixed_dictionaries({"name": st.text(max_size=8), "arguments": json_like})}
            ),
            max_size=2,
        ),
    ),
    max_size=5,
)
conversations = st.lists(st.one_of(messages, scalars), max_size=6)


def _deep(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.fixture(scope="module")
def model(tiny_model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "good.jinja"
    path.write_text(templates.GOOD, encoding="utf-8")
    return load(tiny_model_dir, path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(conversations, min_size=0, max_size=3))
def test_library_with_malformed_conversations(model, batch):
    items = [Conversation(id=f"u{i}", messages=m, tools=None) for i, m in enumerate(batch)]
    try:
        report = audit(model, AuditOptions(conversations=items))
    except AuditError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert report.verdict


def test_library_with_deep_nesting_and_non_finite_numbers(model):
    deep = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": _deep(500)}}],
        },
    ]
    with pytest.raises(AuditError, match="nested deeper"):
        audit(model, AuditOptions(conversations=[Conversation(id="deep", messages=deep)]))
    odd = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": math.nan, "y": math.inf}}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "name": "f", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    report = audit(model, AuditOptions(conversations=[Conversation(id="nan", messages=odd)]))
    assert report.variants[0].conversations_audited == 1


def _run_main(argv, capsys):
    from tito_audit import cli

    old = sys.argv
    sys.argv = ["tito-audit", *argv]
    try:
        with pytest.raises(SystemExit) as done:
            cli.main()
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return done.value.code, captured.out, captured.err


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=12))
def test_cli_with_random_templates(tiny_model_dir, tmp_path_factory, capsys, parts):
    workdir = tmp_path_factory.mktemp("cli")
    template = workdir / "t.jinja"
    template.write_text("".join(parts), encoding="utf-8")
    before = set(os.listdir(workdir))
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        code, _, err = _run_main(
            [
                "audit",
                str(tiny_model_dir),
                "--template",
                str(template),
                "-n",
                "3",
                "-q",
                "--json",
                "out.json",
                "--max-render-seconds",
                "2",
            ],
            capsys,
        )
    finally:
        os.chdir(cwd)
    assert code in (0, 1, 2)
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    assert set(os.listdir(workdir)) - before <= {"out.json"}
