"""Inputs come only from what the user named, are read with a bound, and every fault is one line naming the option
and the file: an endless device, JSON nested past the recursion limit, a tools file found beside the data, an
output path that cannot be written (before the audit runs), --max-turns past its bound, progress on long reads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests import templates
from tests.test_cli import run_cli
from tito_audit.cli.matrix import read_models_file
from tito_audit.conversations import datasources
from tito_audit.conversations.datasources import load_conversations
from tito_audit.errors import BadInputError
from tito_audit.gate.policy import load_baseline

RECORD = {
    "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
}
SLOW = "{%- for i in range(10000) -%}{%- for j in range(1000) -%}{%- endfor -%}{%- endfor -%}" + templates.GOOD
"""About half a second per render: its audit takes minutes (an output fault must be found before it)."""


def _data(tmp_path: Path, name: str = "chats.json", records: list | None = None) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records or [RECORD]), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("read", "fragment"),
    [
        (lambda: load_baseline(Path("/dev/zero")), "--baseline /dev/zero: larger than"),
        (lambda: read_models_file(Path("/dev/zero")), "--models-file /dev/zero: larger than"),
    ],
    ids=["baseline", "models-file"],
)
def test_an_endless_file_is_refused_naming_the_option(read, fragment):
    with pytest.raises(BadInputError) as caught:
        read()
    assert fragment in str(caught.value)


def test_an_endless_tools_file_is_refused_naming_the_option(tmp_path):
    with pytest.raises(BadInputError, match=r"^--tools /dev/zero: larger than"):
        load_conversations(str(_data(tmp_path)), tools_file=Path("/dev/zero"))


def test_json_nested_too_deeply_names_the_file_and_the_option(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(BadInputError, match=r"^--conversations .*deep\.json: JSON nested too deeply"):
        load_conversations(str(deep))
    with pytest.raises(BadInputError, match=r"^--baseline .*deep\.json: JSON report nested too deeply"):
        load_baseline(deep)
    with pytest.raises(BadInputError, match=r"^--tools .*deep\.json: JSON nested too deeply"):
        load_conversations(str(_data(tmp_path)), tools_file=deep)


def test_a_file_nobody_named_beside_the_data_is_not_read(tmp_path):
    data = _data(tmp_path)
    (tmp_path / "tools_notes.json").write_text('[1, 2, "x"]', encoding="utf-8")
    dataset = load_conversations(str(data))
    assert dataset.tools is None and dataset.conversations[0].tools is None


def test_a_bad_tools_file_found_by_convention_is_named_as_such(tmp_path):
    data = _data(tmp_path)
    (tmp_path / "chats_tools.json").write_text('[1, 2, "x"]', encoding="utf-8")
    with pytest.raises(BadInputError) as caught:
        load_conversations(str(data))
    message = str(caught.value)
    assert "the tools file found beside chats.json" in message and "chats_tools.json" in message
    assert "item 0 is 1, not an object" in message and "--tools" not in message


def test_a_tools_file_named_after_the_data_file_is_used(tmp_path):
    data = _data(tmp_path)
    schema = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    (tmp_path / "chats.tools.json").write_text(json.dumps(schema), encoding="utf-8")
    (tmp_path / "other_tools.json").write_text("[1]", encoding="utf-8")  # the data file's own wins
    dataset = load_conversations(str(data))
    assert dataset.tools == "chats.tools.json" and dataset.conversations[0].tools == schema


def test_reading_many_records_reports_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(datasources, "PROGRESS_RECORDS", 100)
    seen: list[int] = []
    dataset = load_conversations(str(_data(tmp_path, records=[RECORD] * 350)), on_progress=seen.append)
    assert seen == [100, 200, 300] and dataset.records == 350


def test_template_from_an_endless_device_is_one_line(tiny_model_dir):
    result = run_cli("audit", str(tiny_model_dir), "--template", "/dev/zero")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "--template /dev/zero: larger than" in lines[0] and "no such file" not in lines[0]


def test_max_turns_past_its_bound_is_refused(tiny_model_dir):
    result = run_cli("audit", str(tiny_model_dir), "--max-turns", "100000")
    assert result.returncode == 2 and "--max-turns" in result.stderr and "Traceback" not in result.stderr


def test_a_bad_output_path_is_reported_before_the_audit(tiny_model_dir, write_template, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    try:
        slow = write_template("slow", SLOW)
        result = run_cli_with_budget(
            "audit", str(tiny_model_dir), "--template", str(slow), "--json", str(blocker / "report.json")
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the audit ran before the output path was checked")
    assert result.returncode == 2, result.stderr
    assert f"--json {blocker / 'report.json'}: {blocker} is a file, not a folder" in result.stderr


def run_cli_with_budget(*args: str, budget: float = 60) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "tito_audit.cli", *args],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "200", "TOKENIZERS_PARALLELISM": "false"},
        timeout=budget,
    )
