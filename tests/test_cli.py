"""The command line: exit codes, one-line errors, report files, byte-identical JSON for one seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import templates
from tito_audit.formatters.json_report import VOLATILE_KEYS


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tito_audit.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "120", "TOKENIZERS_PARALLELISM": "false"},
        timeout=300,
    )


def without_volatile(document: dict) -> dict:
    return {k: v for k, v in document.items() if k not in VOLATILE_KEYS}


def test_ready_template_exits_0_and_writes_reports(tiny_model_dir, write_template, tmp_path):
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    result = run_cli(
        "audit",
        str(tiny_model_dir),
        "--template",
        str(write_template("good", templates.GOOD)),
        "-n",
        "12",
        "--json",
        str(out_json),
        "--markdown",
        str(out_md),
    )
    assert result.returncode == 0, result.stderr
    assert "ready" in result.stdout
    document = json.loads(out_json.read_text())
    assert document["verdict"] == "ready"
    assert document["settings"]["seed"] == 0 and document["settings"]["count"] == 12
    assert document["model"]["template_sha256"] and document["model"]["file_sha256"]["tokenizer.json"]
    assert {"transformers", "tokenizers", "jinja2"} <= set(document["library_versions"])
    assert set(document["variants"][0]["checks"]) == {"roundtrip", "append", "rollout", "bridge", "mask"}
    assert out_md.read_text().startswith("# tito-audit:")


def test_broken_template_exits_1(tiny_model_dir, write_template):
    result = run_cli(
        "audit",
        str(tiny_model_dir),
        "--template",
        str(write_template("bad", templates.EMPTY_THINK_ONLY_WHEN_LAST)),
        "-n",
        "12",
        "--quiet",
    )
    assert result.returncode == 1
    assert result.stdout.strip().startswith("broken")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["audit", "acme/does-not-exist", "--no-hub"], "not found; tried"),
        (["audit", "./no/such/dir"], "neither an existing folder"),
        (["audit", "TINY", "--kwarg", "novalue"], "name=value"),
        (["audit", "TINY", "--template", "/no/such.jinja"], "no such file"),
        (["audit", "TINY", "--template-name", "tool_use"], "no chat template named"),
        (["audit", "TINY", "--clock", "yesterday"], "--clock"),
        (["audit", "TINY", "-n", "0"], "--count"),
        (["audit"], "Missing argument"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tiny_model_dir, args, fragment):
    args = [str(tiny_model_dir) if a == "TINY" else a for a in args]
    result = run_cli(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert any(fragment in line for line in lines), result.stderr
    assert "error" in result.stderr.lower()


def test_same_seed_gives_byte_identical_json(tiny_model_dir, write_template, tmp_path):
    template = write_template("dated", templates.DATED_SYSTEM_PROMPT)
    documents = []
    for run in range(2):
        path = tmp_path / f"run{run}.json"
        result = run_cli(
            "audit",
            str(tiny_model_dir),
            "--template",
            str(template),
            "-n",
            "10",
            "--seed",
            "5",
            "--json",
            str(path),
            "--quiet",
        )
        assert result.returncode in (0, 1), result.stderr
        documents.append(json.loads(path.read_text()))
    assert json.dumps(without_volatile(documents[0])) == json.dumps(without_volatile(documents[1]))
    other = tmp_path / "other.json"
    run_cli(
        "audit", str(tiny_model_dir), "--template", str(template), "-n", "10", "--seed", "6", "--json", str(other), "-q"
    )
    assert without_volatile(json.loads(other.read_text())) != without_volatile(documents[0])


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("tito-audit ")
