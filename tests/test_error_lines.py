"""Hostile input that reached Python's own limits (a template nested past the parser's depth or past what Python
compiles, a ``--kwarg`` nested past JSON's recursion or holding text that is not UTF-8, a rollout file with data the
session refuses) is one line naming the template, the option or the file and record, exit 2: never "unexpected"."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import templates
from tests.test_cli import run_cli

ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "120", "TOKENIZERS_PARALLELISM": "false"}
READS_X = "{%- if x is defined %}{{ x }}{% endif -%}" + templates.GOOD


def nested(opening: str, closing: str, depth: int, inner: str = "x") -> str:
    return opening * depth + inner + closing * depth


@pytest.mark.parametrize(
    ("name", "source", "said"),
    [
        ("parens", "{{ " + nested("(", ")", 5000, "1") + " }}", "nested deeper than Jinja's parser reads"),
        ("ifs", nested("{% if true %}", "{% endif %}", 3000), "nested deeper than Jinja's parser reads"),
        ("indented", nested("{% if true %}", "{% endif %}", 110) + templates.GOOD, "IndentationError"),
        ("loops", nested("{% for i in [1] %}", "{% endfor %}", 60) + templates.GOOD, "statically nested blocks"),
    ],
)
def test_a_template_nested_too_deeply_is_one_line_naming_it(tiny_model_dir, write_template, name, source, said):
    path = write_template(name, source)
    result = run_cli("audit", str(tiny_model_dir), "--template", str(path), "-n", "2", "--parser", "template")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-1500:]
    assert str(path) in lines[0] and said in lines[0] and "unexpected" not in lines[0], lines[0]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("x=" + nested("[", "]", 1000, "1"), "--kwarg x: JSON nested too deeply to read"),
        ("x=" + nested("[", "]", 100, "1"), "--kwarg x: the value is nested deeper than 64 levels"),
        (os.fsdecode(b'x="\xff\xfe"'), "--kwarg x: the value is not valid text (a byte 0xFF that is not UTF-8"),
        ('x="\\ud800"', "--kwarg x: the value is not valid text (a lone surrogate U+D800"),
    ],
)
def test_a_kwarg_past_what_can_be_read_is_one_line_naming_it(tiny_model_dir, write_template, value, said):
    command = ["audit", str(tiny_model_dir), "--template", str(write_template("reads-x", READS_X)), "-n", "2"]
    result = subprocess.run(
        [sys.executable, "-m", "tito_audit.cli", *command, "--parser", "template", "--kwarg", value],
        capture_output=True,
        env=ENV,
        timeout=300,
    )
    stderr = result.stderr.decode("utf-8", "replace")
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, stderr[-1500:]
    assert said in lines[0], lines[0]


def test_replay_names_its_file_and_record(tiny_model_dir, write_template, tmp_path):
    deep: dict = {}
    inner = deep
    for _ in range(100):
        inner["a"] = {}
        inner = inner["a"]
    tools = [{"type": "function", "function": {"name": "f", "parameters": deep}}]
    record = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}],
        "tools": tools,
        "turns": [{"prompt_ids": [1, 2], "completion_ids": [3]}],
    }
    deep_file, bad_utf8 = tmp_path / "deep.jsonl", tmp_path / "bytes.jsonl"
    deep_file.write_text(json.dumps(record) + "\n", encoding="utf-8")
    bad_utf8.write_bytes(b'{"a": "\xff"}\n')
    template = str(write_template("good", templates.GOOD))
    for path, said in ((deep_file, "ROLLOUTS deep.jsonl: record 0: tools is nested deeper"), (bad_utf8, "ROLLOUTS")):
        result = run_cli("replay", str(path), "--model", str(tiny_model_dir), "--template", template)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1, result.stderr[-1500:]
        assert said in lines[0] and "--conversations" not in lines[0], lines[0]
