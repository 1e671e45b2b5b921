"""A newcomer's first hour (issue 45): commands the tool suggests run as printed, output fits 80 columns, bad
inputs give one line and a documented exit code, a long run shows progress off a terminal, a second run says it
changed nothing, and the gateway names what its counts count."""

from __future__ import annotations

import itertools
import json
import re
import shlex
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.test_cli import run_cli
from tito_audit.cli import app
from tito_audit.formatters.results_table import narrowest_width, print_results
from tito_audit.model.near_miss import near_miss
from tito_audit.model.resolve import folder_name, resolve_model

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("audit", "check", "explain", "patch", "matrix", "replay", "serve")
TYPE_NAMES = re.compile(r"<(str|bool|int|float|path|list\[[^\]]*\])[^>]*>")


# -- suggested commands -------------------------------------------------------------------------------------------
def test_every_suggested_command_runs_as_printed(tiny_model_dir, tmp_path):
    """The model found through a mirror, offline, with its own template and a pinned keyword argument: each command
    the report suggests (terminal and Markdown) is pasted and runs (formerly ``tito-audit patch MODEL -o FILE``
    without the mirror: model not found, exit 2)."""
    template = tmp_path / "chat.jinja"
    template.write_text(templates.MULTILINE_EMPTY_THINK, encoding="utf-8")
    found = ["--mirror", str(tiny_model_dir.parent), "--no-hub", "--template", "chat.jinja", "--kwarg", "unused=1"]
    result = run_cli("audit", "tiny-org/tiny-model", *found, "-n", "8", "--markdown", "report.md", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    printed = [line.split(": ", 1)[1] for line in result.stdout.splitlines() if ": tito-audit " in line]
    written = re.findall(r"`(tito-audit [^`]+)`", (tmp_path / "report.md").read_text(encoding="utf-8"))
    assert printed and set(printed) == set(written), (printed, written)
    assert {shlex.split(c)[1] for c in printed} == {"explain", "patch"}
    for command in printed:
        words = shlex.split(command.replace("-o FILE", "-o fixed.jinja"))
        assert words[2] == "tiny-org/tiny-model"
        pairs = list(itertools.pairwise(words))
        assert all((found[k], found[k + 1]) in pairs for k in (0, 3, 5)) and "--no-hub" in words
        pasted = subprocess.run(
            [sys.executable, "-m", "tito_audit.cli", *words[1:]], capture_output=True, text=True, cwd=tmp_path
        )
        assert pasted.returncode in (0, 1) and "error:" not in pasted.stderr, (command, pasted.stderr)
    assert (tmp_path / "fixed.jinja").is_file()


# -- 80 columns ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_at_80_columns_cuts_nothing_and_names_values_readably(command):
    result = CliRunner().invoke(app, [*([command] if command else []), "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.output, [line for line in lines if "…" in line]
    assert not TYPE_NAMES.search(result.output), TYPE_NAMES.findall(result.output)
    if command == "check":
        assert "[tool.tito-audit]" in result.output, "brackets are text, not markup"


def test_serve_help_lists_the_gateways_endpoints_and_statuses():
    """docs/gateway.md says ``serve --help`` lists them: every route of the app and every status of the docs' table."""
    pytest.importorskip("starlette", reason="the gateway extra is not installed")
    from tito_audit.gateway.app import create_app

    shown = " ".join(CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output.split())
    routes = create_app(SimpleNamespace(config=SimpleNamespace(max_request_bytes=1))).routes  # type: ignore[arg-type]
    for route in routes:
        for method in sorted(route.methods - {"HEAD"}):
            assert f"{method} {route.path.replace('{session_id}', 'ID')}" in shown, (method, route.path)
    statuses = set(re.findall(r"^\| (\d{3}) \|", (ROOT / "docs" / "gateway.md").read_text(encoding="utf-8"), re.M))
    assert len(statuses) >= 10
    for status in statuses:
        assert f" {status} " in shown, status


def test_results_table_never_splits_a_model_id():
    rows = [
        {
            "model_id": model_id,
            "verdict": "ready-tool-only",
            "status": "audited",
            "same_as": "",
            "sglang_verdict": "broken",
            "sglang_parser": "sglang qwen3_coder+qwen3",
            "vllm_verdict": "ready-tool-only",
            "vllm_parser": "vllm qwen3_coder+qwen3",
            "audit_level": "text-level only",
            "main_causes": "history-dependent-suffix, tool-call-reformatted",
        }
        for model_id in ("ServiceNow-AI/Apriel-1.5-15b-Thinker", "meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    ]
    for width in (80, 100, narrowest_width(rows), 200):
        console = Console(width=width, record=True, color_system=None)
        print_results(rows, console)
        text = console.export_text()
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= width
        for row in rows:
            assert any(row["model_id"] in line for line in lines), (width, text)
        assert "…" not in text


def test_a_model_that_was_not_audited_says_why_instead_of_empty_level_and_causes():
    audited = {
        "model_id": "Qwen/Qwen3-4B",
        "verdict": "broken",
        "status": "audited",
        "reason": "",
        "same_as": "",
        "audit_level": "full",
        "main_causes": "parse-lossy",
    }
    missing = audited | {
        "model_id": "allenai/Olmo-3-7B-Instruct",
        "verdict": "",
        "status": "not audited: not reachable",
        "reason": "model 'allenai/Olmo-3-7B-Instruct' not found; tried: cache templates_cache/x; hub (disabled)",
        "audit_level": "",
        "main_causes": "",
    }
    rows = [audited, missing]
    for width in (60, 200):  # a block per model, then the table
        console = Console(width=width, record=True, color_system=None)
        print_results(rows, console)
        text = console.export_text()
        assert "level: ;" not in text and "main causes: \n" not in text + "\n", text
        assert "not found; hub (disabled)" in " ".join(text.split()), text
        assert "main causes: parse-lossy" in text or "parse-lossy" in text


# -- bad inputs ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["missing", "file"])
@pytest.mark.parametrize("command", ["audit", "matrix"])
def test_a_mirror_that_is_not_a_folder_is_one_line_naming_the_option(tmp_path, kind, command):
    mirror = tmp_path / "tokenizerz"
    if kind == "file":
        mirror.write_text("not a folder", encoding="utf-8")
    out = ["--out", str(tmp_path / "out")] if command == "matrix" else []
    result = run_cli(command, "tiny-org/tiny-model", "--mirror", str(mirror), "--no-hub", *out)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: --mirror {mirror}: ")
    assert ("is a file, not a folder" if kind == "file" else "no such folder") in result.stderr


def test_a_near_miss_id_gets_did_you_mean(tmp_path, tiny_model_dir):
    mirror = tmp_path / "mirror"
    (mirror / "Acme--Tiny-Chat").mkdir(parents=True)
    for item in tiny_model_dir.iterdir():
        (mirror / "Acme--Tiny-Chat" / item.name).write_bytes(item.read_bytes())
    assert near_miss(folder_name("acme/tiny-chat"), [mirror]) == ("Acme/Tiny-Chat", mirror)
    assert near_miss(folder_name("Acme/Tiny_Chat"), [mirror]) == ("Acme/Tiny-Chat", mirror)
    assert near_miss(folder_name("Acme/Tiny-Chats"), [mirror]) == ("Acme/Tiny-Chat", mirror)
    assert near_miss(folder_name("Acme/Tiny-Chat2"), [mirror]) is None, "a digit is another model, not a typo"
    assert near_miss(folder_name("Other/Model"), [mirror]) is None
    with pytest.raises(Exception, match=r"did you mean 'Acme/Tiny-Chat'\? it is in mirror"):
        resolve_model("acme/tiny-chat", mirrors=[mirror], allow_hub=False)
    result = run_cli("audit", "Acme/tiny-chat", "--mirror", str(mirror), "--no-hub")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "did you mean 'Acme/Tiny-Chat'?" in result.stderr


def test_serve_on_a_busy_port_is_one_line_naming_port_and_no_banner(tiny_model_dir, tmp_path):
    pytest.importorskip("starlette", reason="the gateway extra is not installed")
    template = tmp_path / "chat.jinja"
    template.write_text(templates.GOOD, encoding="utf-8")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli(
            "serve", str(tiny_model_dir), "--template", str(template), "--engine", "fake", "--port", str(port)
        )
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert (
        result.stderr == f"error: --port {port}: 127.0.0.1:{port} is already in use (another server listens there)"
        "; give another --port\n"
    )


# -- a long run ----------------------------------------------------------------------------------------------------
def test_matrix_off_a_terminal_prints_a_line_per_model_and_a_second_run_says_unchanged(tiny_model_dir, tmp_path):
    template_folder = tmp_path / "mirror" / "tiny-org--chat"
    template_folder.mkdir(parents=True)
    for item in tiny_model_dir.iterdir():
        (template_folder / item.name).write_bytes(item.read_bytes())
    (template_folder / "chat_template.jinja").write_text(templates.GOOD, encoding="utf-8")
    args = ["matrix", "tiny-org/chat", "no-such/model", "--mirror", str(tmp_path / "mirror"), "--no-hub", "-n", "4"]
    args += ["-j", "1", "--out", str(tmp_path / "out"), "--results-cache", str(tmp_path / "results")]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert "2 models: a line for each as it is done" in first.stderr
    assert re.search(r"^\[\d/2\] tiny-org/chat: audited in \d+s \(\d+s since the start\)$", first.stderr, re.M)
    assert re.search(r"^\[\d/2\] no-such/model: not audited: not reachable ", first.stderr, re.M)
    assert re.search(r"^wrote \d+ files in .*/out/ \(", first.stdout, re.M), first.stdout
    second = run_cli(*args)
    assert re.search(r"^\[\d/2\] tiny-org/chat: from stored results ", second.stderr, re.M), second.stderr
    assert f"{tmp_path / 'out'}/ unchanged: every file already held these results" in second.stdout
    assert "wrote" not in second.stdout


# -- the gateway's counts ------------------------------------------------------------------------------------------
@requires_shared
def test_a_breaks_counts_name_what_they_count():
    """``tito.turn`` is the answer's number; a break's ``step`` counts extensions and its ``turn`` (also
    ``answer_message_index``) is where the answer sits in the conversation (docs/gateway.md)."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("starlette", reason="the gateway extra is not installed")
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running
    from tito_audit.session import TitoBreakWarning

    config = GatewayConfig("Qwen/Qwen3-4B", parser="template", mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    with running(Gateway(config)) as url, warnings.catch_warnings():
        warnings.simplefilter("ignore", TitoBreakWarning)
        messages: list[dict] = [{"role": "user", "content": "Hi there"}]
        for answers in range(1, 9):
            answer = httpx.post(
                f"{url}/v1/chat/completions", json={"messages": messages}, headers={"X-Session-Id": "n"}
            )
            tito = answer.json()["tito"]
            assert tito["turn"] == answers
            if tito["breaks"]:
                found = tito["breaks"][0]
                assert found["step"] == answers - 1
                assert found["turn"] == found["answer_message_index"] == len(messages)
                return
            messages += [answer.json()["choices"][0]["message"], {"role": "user", "content": f"More ({answers})."}]
    pytest.fail("no break in 8 answers")


def test_json_of_a_break_keeps_its_old_field():
    from tito_audit.gateway.turn_steps import break_record
    from tito_audit.session.breaks import SessionBreak

    record = break_record(SessionBreak(step=1, turn=4, aspect="text", causes=["x"], roles=["tool"]))
    assert (record["step"], record["turn"], record["answer_message_index"]) == (1, 4, 4)
    json.dumps(record)


# -- the Markdown model page -------------------------------------------------------------------------------------
def test_the_markdown_page_has_the_html_pages_glossary_and_links_its_way_out(tiny_model_dir, tmp_path):
    from tests.helpers import load
    from tito_audit.audit.service import AuditOptions, audit
    from tito_audit.formatters.fix_report import FixPage
    from tito_audit.formatters.markdown import to_markdown
    from tito_audit.formatters.site import model_page
    from tito_audit.formatters.site.glossary import CAUSES

    template = tmp_path / "chat.jinja"
    template.write_text(templates.MULTILINE_EMPTY_THINK, encoding="utf-8")
    report = audit(load(tiny_model_dir, template), AuditOptions(count=12, parser="template"))
    way_out = FixPage("fix (2 lines): keep the empty think block → ready", None, True, [], None)
    page = to_markdown(report, way_out, "../fixes/tiny.md")
    assert "**Way out: fix (2 lines): keep the empty think block → ready** ([its page](../fixes/tiny.md))" in page
    glossary = page.split("## Glossary", 1)[1]
    html_causes = re.findall(r'id="cause-([a-z0-9-]+)"', model_page(report))
    assert html_causes and "empty-think-dropped" in html_causes
    for cause in html_causes:
        assert f"- `{cause}`: {CAUSES[cause]}" in glossary, cause
    assert f"- **{report.verdict}**: " in glossary
    assert "`tito-audit patch " in page.split("## Next", 1)[1], "a fix was offered: the page says how to write it"
