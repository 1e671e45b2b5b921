"""Bad input never gives a traceback: one line on stderr and exit code 2 (or a finding in the report)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests import templates
from tests.test_cli import run_cli

SLOW = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
HUGE = "{% for i in range(1000) %}{% for j in range(1000) %}xxxxxxxxxx{% endfor %}{% endfor %}"


@pytest.mark.parametrize(
    ("name", "source", "fragment"),
    [
        ("syntax", "{% for m in messages %}{{ m.content }", "not valid Jinja: line 1"),
        ("raises", "{{ raise_exception('no thanks') }}", "refused every conversation (TemplateError: no thanks"),
        ("escape-class", "{{ ''.__class__.__mro__[1].__subclasses__() }}", "refused every conversation (SecurityError"),
        ("escape-globals", "{{ cycler.__init__.__globals__.os.popen('id').read() }}", "refused every conversation"),
        ("import", "{% import 'os' as os %}{{ os }}", "refused every conversation"),
        ("file", "{% include '/etc/passwd' %}", "refused every conversation"),
        ("huge", HUGE, "output longer than"),
    ],
)
def test_bad_templates_exit_2_with_one_line(tiny_model_dir, write_template, tmp_path, name, source, fragment):
    out = tmp_path / "out"
    out.mkdir()
    result = run_cli(
        "audit",
        str(tiny_model_dir),
        "--template",
        str(write_template(name, source)),
        "-n",
        "4",
        "--max-render-chars",
        "100000",
        cwd=out,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert fragment in lines[0], lines[0]
    assert list(out.iterdir()) == [], "nothing written besides the requested outputs"


def test_slow_template_is_bounded_by_time(tiny_model_dir, write_template):
    result = run_cli(
        "audit",
        str(tiny_model_dir),
        "--template",
        str(write_template("slow", SLOW)),
        "-n",
        "2",
        "--max-render-seconds",
        "0.2",
    )
    assert result.returncode == 2
    assert "took longer than 0.2s" in result.stderr


def test_kwarg_the_template_does_not_read_is_a_warning(tiny_model_dir, write_template):
    result = run_cli(
        "audit",
        str(tiny_model_dir),
        "--template",
        str(write_template("good", templates.GOOD)),
        "-n",
        "4",
        "--kwarg",
        "enable_thinking=false",
        "-q",
    )
    assert result.returncode == 0
    assert "warning: --kwarg enable_thinking is not read by the template" in result.stderr


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_kwargs_are_refused(tiny_model_dir, value):
    result = run_cli("audit", str(tiny_model_dir), "--kwarg", f"x={value}")
    assert result.returncode == 2 and "not a valid value" in result.stderr


def test_truncated_tokenizer_json(tmp_path, tiny_model_dir):
    folder = tmp_path / "acme--cut"
    shutil.copytree(tiny_model_dir, folder)
    data = (folder / "tokenizer.json").read_bytes()
    (folder / "tokenizer.json").write_bytes(data[: len(data) // 2])
    result = run_cli("audit", str(folder))
    assert result.returncode == 2 and result.stderr.startswith("error: cannot load tokenizer")


def test_invalid_utf8_template(tiny_model_dir, tmp_path):
    path = tmp_path / "bad.jinja"
    path.write_bytes(b"\xff\xfe{{ messages }}")
    result = run_cli("audit", str(tiny_model_dir), "--template", str(path))
    assert result.returncode == 2 and "cannot read template file" in result.stderr


def test_remote_code_is_refused_naming_the_file(tmp_path, tiny_model_dir):
    folder = tmp_path / "acme--remote"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_acme.AcmeTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    result = run_cli("audit", str(folder))
    assert result.returncode == 2 and "tokenization_acme.py" in result.stderr and "--trust-remote-code" in result.stderr
