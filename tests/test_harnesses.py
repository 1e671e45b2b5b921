"""The harness matrix: a real PyPI harness (pydantic-ai, installed apart by ``make install``) runs end to end against
the gateway and the stand-in engine, and its row is the gateway's own record; the proxy trap catches a reach for
another host; rows, fixes and the published files (a rerun with nothing changed rewrites nothing)."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tito_audit.harnesses.catalogue import HARNESSES, harness_named
from tito_audit.harnesses.harness import DEFAULT, NPM, PYPI
from tito_audit.harnesses.isolation import ProxyTrap
from tito_audit.harnesses.publish import publish, with_fixes
from tito_audit.harnesses.rows import row_of, trainable_share

INSTALLED = Path(__file__).resolve().parent.parent / ".venv" / "harnesses"


def test_every_harness_is_pinned_and_named_once():
    names = [h.name for h in HARNESSES]
    assert len(names) == len(set(names)) >= 10
    assert {h.source for h in HARNESSES} == {NPM, PYPI}
    for harness in HARNESSES:
        assert harness.version and harness.version[0].isdigit()
        assert harness.configurations[0] == DEFAULT
        if harness.source == PYPI:
            assert harness.venv and all("==" in r for r in harness.requirements)
    with pytest.raises(KeyError, match="no harness named"):
        harness_named("nope")


def test_the_proxy_trap_records_a_reach_for_another_host_and_lets_loopback_through():
    import http.server
    import threading

    local = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=local.serve_forever, daemon=True).start()
    trap = ProxyTrap()
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{trap.port}"}))
        with pytest.raises(OSError):
            opener.open("http://telemetry.invalid/collect", timeout=5)
        with opener.open(f"http://127.0.0.1:{local.server_address[1]}/", timeout=10) as relayed:
            assert relayed.status == 200
        attempts = trap.taken()
    finally:
        trap.close()
        local.shutdown()
    assert attempts == ["GET http://telemetry.invalid/collect HTTP/1.1"]


def _cell(sampled: int, in_loss: int, exit_code: int = 0, network: list[str] | None = None) -> dict:
    session = {
        "requests": 4,
        "turns": 4,
        "branches": 2,
        "branch_makers": [{"maker": "harness", "action": "summarized", "message": "input[3]"}],
        "break_makers": [{"maker": "template", "cause": "reasoning-pruned"}],
        "trainable": {"sampled": sampled, "in_loss": in_loss, "lost": {"harness: summarized": sampled - in_loss}},
        "found": ["conversation", "new"],
        "unsampled": 0,
    }
    rollout = {"exit": exit_code, "seconds": 3.0, "network": network or [], "stdout": "", "stderr": "boom\n"}
    return {"rollouts": [rollout], "sessions": [session], "seconds": 3.2}


def test_a_row_sums_the_records_and_a_fix_brings_it_back(tmp_path):
    harness = harness_named("pydantic-ai")
    fix = harness.configurations[1]
    rows = [
        row_of(harness, DEFAULT, "m", "sglang", _cell(100, 80)),
        row_of(harness, fix, "m", "sglang", _cell(90, 90)),
        row_of(harness, DEFAULT, "m", "vllm", _cell(50, 50, network=["CONNECT example.com:443 HTTP/1.1"])),
    ]
    first = rows[0]
    assert (first["sampled"], first["in_loss"], first["share"]) == (100, 80, 0.8)
    assert first["lost"] == {"harness: summarized": 20}
    assert first["made_by"] == {"harness": 1} and first["breaks"] == {"template": 1}
    assert first["history"] == {"summarized": 1} and first["causes"] == {"template: reasoning-pruned": 1}
    assert trainable_share(rows[2]) == 0.0  # it reached for another host: the run fails
    shown = with_fixes(rows)
    assert [r["configuration"] for r in shown] == ["default", "default"]
    assert shown[0]["fix"] == {
        "configuration": fix.name,
        "trainable": 1.0,
        "sampled": 90,
        "in_loss": 90,
        "why": fix.fixes,
    }
    table = {"rows": rows, "rollouts": 1, "seed": 0, "isolated": True}
    written = publish(table, tmp_path)
    assert sorted(p.name for p in written) == ["harnesses.html", "harnesses.json", "harnesses.md"]
    assert publish(table, tmp_path) == []  # nothing changed: nothing rewritten
    data = json.loads((tmp_path / "harnesses.json").read_text())
    assert (
        data["rows"][0]["trainable"] == 0.8
        and "reached for CONNECT to another host, port 443" in (tmp_path / "harnesses.md").read_text()
    )
    assert "example.com" not in (tmp_path / "harnesses.md").read_text() + (tmp_path / "harnesses.json").read_text()


@requires_shared
@pytest.mark.shared
@pytest.mark.skipif(
    not (INSTALLED / "venv-pydantic-ai" / "bin" / "python").exists(),
    reason="pydantic-ai is not installed into .venv/harnesses (make install installs it)",
)
def test_pydantic_ai_runs_end_to_end_and_its_row_is_the_gateways_record():
    import httpx

    from tito_audit.harnesses.group import GroupSpec, Runner, gateway_for, run_cell, session_ids

    model = "Qwen/Qwen2.5-7B-Instruct"
    spec = GroupSpec(model, "sglang", [("pydantic-ai", "default")], 1, 0, [str(SHARED_TOKENIZERS)], str(INSTALLED))
    harness = harness_named("pydantic-ai")
    trap = ProxyTrap()
    try:
        with gateway_for(spec, {}) as gateway:
            url = gateway.url
            cell = run_cell(spec, harness, DEFAULT, url, Runner(trap, resends=gateway.resends))
            records = [httpx.get(f"{url}/sessions/{sid}", trust_env=False).json() for sid in session_ids(url)]
    finally:
        trap.close()
    row = row_of(harness, DEFAULT, model, "sglang", cell)
    assert cell["rollouts"][0]["exit"] == 0, cell["rollouts"][0]["stderr"]
    assert row["finished"] == 1 and row["network"] == []
    assert row["sampled"] == sum(r["trainable"]["sampled"] for r in records) > 0
    assert row["in_loss"] == sum(r["trainable"]["in_loss"] for r in records)
    assert row["turns"] == sum(1 for r in records for t in r["turns"] if t.get("sampled")) >= 4
    results = [m for r in records for m in r["messages"] if m.get("role") == "tool"]
    assert any("TODO" in str(m.get("content")) or "README.md" in str(m.get("content")) for m in results)
    assert os.path.isdir("/var/tmp/tito-harnesses")


def test_the_command_refuses_an_unknown_harness_in_one_line(tmp_path):
    from tests.test_cli import run_cli

    result = run_cli("harnesses", "--harness", "nope", "--installed", str(tmp_path))
    assert result.returncode == 2
    assert "--harness nope: no such harness" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


# -- what decides a cell, what a run runs ---------------------------------------------------------------------------
def _package_copy(tmp_path: Path) -> Path:
    import shutil

    from tito_audit.harnesses.fingerprint import package_root

    copy = tmp_path / "tito_audit"
    shutil.copytree(package_root(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_a_change_to_one_harness_changes_its_cells_keys_only(tmp_path):
    from tito_audit.harnesses.fingerprint import harness_digests, runner_digest

    root = _package_copy(tmp_path)
    runner, digests = runner_digest(root), harness_digests(HARNESSES, root)
    _append(root / "harnesses" / "smolagents.py", "\n# a change to smolagents' row\n")
    _append(root / "harnesses" / "drivers" / "drive_langgraph.py", "\n# and to langgraph's driver\n")
    _append(root / "harnesses" / "publish.py", "\n# the pages' own code decides no record\n")
    changed = harness_digests(HARNESSES, root)
    assert runner_digest(root) == runner
    assert {name for name in digests if changed[name] != digests[name]} == {"smolagents", "langgraph"}
    _append(root / "harnesses" / "drivers" / "looking.py", "\n# what every framework driver shares\n")
    shared = harness_digests(HARNESSES, root)
    assert {n for n in digests if shared[n] != changed[n]} == {
        h.name for h in HARNESSES if h.command.__class__.__name__ == "FrameworkCommand"
    }
    _append(root / "gateway" / "standin" / "turn_plan.py", "\n# the stand-in engine decides every cell\n")
    _append(root / "session" / "__init__.py", "\n# and so does the session the gateway keeps\n")
    assert runner_digest(root) != runner and harness_digests(HARNESSES, root) == shared


def test_a_rerun_with_every_cell_stored_runs_nothing_and_writes_nothing(tmp_path, monkeypatch):
    from tito_audit.harnesses import run
    from tito_audit.matrix.store import ResultsStore

    options = run.TableOptions(
        models=["m/one"], parsers=["sglang"], harnesses=["pydantic-ai", "opencode"], store=tmp_path / "store"
    )
    store = ResultsStore(options.store)
    cells = [
        run.Cell(harness_named(h), c, "m/one", "sglang")
        for h in options.harnesses
        for c in harness_named(h).configurations
    ]
    keys = run.Keys.of(cells, options.mirrors)
    for cell in cells:  # opencode's default below 100%, its first fix at 100%: the second fix never runs
        kept = {"opencode": {"default": 0}, "pydantic-ai": {}}[cell.harness.name].get(cell.configuration.name, 50)
        store.put(run.cell_key(cell, options, keys), {**_cell(50, kept), "harness": cell.harness.name})
    monkeypatch.setattr(run, "run_lane", lambda *a, **k: pytest.fail("a stored cell ran again"))
    table = run.run_table(options)
    assert [(r["name"], r["configuration"]) for r in table["rows"]] == [
        ("pydantic-ai", "default"),
        ("opencode", "default"),
        ("opencode", "@opencode-ai/plugin and ripgrep pre-installed"),
    ]
    out = tmp_path / "reports"
    assert len(publish(table, out)) == 3 and publish(run.run_table(options), out) == []


def test_groups_of_one_engines_parsers_share_a_lane():
    from tito_audit.harnesses.run import lanes_of

    groups = [(m, p) for m in ("a", "b", "c") for p in ("sglang", "vllm")]
    assert lanes_of(groups, 2) == [
        [("a", "sglang"), ("b", "sglang"), ("c", "sglang")],
        [("a", "vllm"), ("b", "vllm"), ("c", "vllm")],
    ]
    assert lanes_of(groups, 1) == [sorted(groups, key=lambda g: (g[1], g[0]))]
    assert sorted(map(len, lanes_of(groups, 3))) == [2, 2, 2]


def test_a_zygote_forks_each_rollout_with_its_own_environment_folder_and_time_limit(tmp_path):
    import sys

    from tito_audit.harnesses.zygotes import Zygotes

    script = tmp_path / "rollout.py"
    script.write_text(
        "import os, sys, time, json\n"
        "print(json.dumps([sys.argv[1:], os.getcwd(), os.environ.get('ROLLOUT'), 'json' in sys.modules]), flush=True)\n"
        "if sys.argv[1] == 'sleep': time.sleep(30)\n"
        "sys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else 0)\n",
        encoding="utf-8",
    )
    zygotes = Zygotes(tmp_path, {"PATH": os.environ.get("PATH", "")})
    try:
        zygote = zygotes.get(sys.executable, ["json"])
        ended = zygote.run([str(script), "3"], {"ROLLOUT": "one"}, tmp_path, 60)
        assert ended.code == 3 and json.loads(ended.stdout) == [["3"], str(tmp_path), "one", True]
        stopped = zygote.run([str(script), "sleep"], {"ROLLOUT": "two"}, tmp_path, 1)
        assert stopped.code is None and b'"two"' in stopped.stdout
        assert zygote.run([str(script), "0"], {}, tmp_path, 60).code == 0  # the zygote serves on
    finally:
        zygotes.close()


def test_a_cell_stops_after_a_failed_rollout_and_its_row_counts_every_planned_one(monkeypatch, tmp_path):
    """A rollout that fails fails its row whatever the others do: the rest are not run, and the row still counts
    every rollout planned (a failed row shows 0%, naming the failure and what was not run)."""
    from tito_audit.harnesses import group

    ends = iter([0, 1])
    ran: list[int] = []

    def rollout(harness, configuration, context, runner):
        ran.append(context.rollout)
        code = next(ends)
        return {"exit": code, "seconds": 1.0, "network": [], "stdout": "", "stderr": "" if code == 0 else "boom\n"}

    monkeypatch.setattr(group, "run_rollout", rollout)
    monkeypatch.setattr(group, "session_ids", lambda url: [])
    monkeypatch.setattr(group, "task_folder", lambda *parts: tmp_path.joinpath(*parts))
    monkeypatch.setattr(group, "home_folder", lambda *parts: tmp_path.joinpath("home", *parts))
    harness = harness_named("pydantic-ai")
    spec = group.GroupSpec("m/one", "sglang", [(harness.name, DEFAULT.name)], 4, 0, [], str(tmp_path))
    cell = group.run_cell(spec, harness, DEFAULT, "http://127.0.0.1:9", None)  # type: ignore[arg-type]
    assert ran == [0, 1] and cell["planned"] == 4
    row = row_of(harness, DEFAULT, "m/one", "sglang", cell)
    assert (row["rollouts"], row["finished"]) == (4, 1) and trainable_share(row) == 0.0
    assert row["failure"] == "exit 1: boom; 2 more rollout(s) not run after one failed"


@requires_shared
@pytest.mark.shared
def test_a_cells_completions_do_not_depend_on_the_cells_run_before_it_in_its_group(monkeypatch, tmp_path):
    """A cell samples the same whether it runs alone or after another cell in the same group (and lane): its draws
    depend on its own requests and the seed, never on what the stand-in engine was asked for an earlier cell (that
    made pydantic-ai on Qwen2.5-7B-Instruct sample 171 ids alone and 207 after openai-agents)."""
    import httpx

    from tito_audit.harnesses import group

    tool = {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
    request = {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "messages": [{"role": "user", "content": "What is in this folder?"}],
        "tools": [tool],
    }

    def rollout(harness, configuration, context, runner):  # every harness asks the same: a call, then its answer
        answer = httpx.post(f"{context.gateway}/v1/chat/completions", json=request, timeout=60, trust_env=False).json()
        message = answer["choices"][0]["message"]  # what the model wrote (the gateway names each call anew)
        calls = [call["function"] for call in message.get("tool_calls") or []]
        said = json.dumps([message.get("reasoning_content"), message.get("content"), calls])
        return {"exit": 0, "seconds": 0.0, "network": [], "stdout": said, "stderr": ""}

    monkeypatch.setattr(group, "run_rollout", rollout)
    monkeypatch.setattr(group, "task_folder", lambda *parts: tmp_path.joinpath(*parts))
    monkeypatch.setattr(group, "home_folder", lambda *parts: tmp_path.joinpath("home", *parts))

    def completions(cells: list[tuple[str, str]]) -> dict[str, list[str]]:
        spec = group.GroupSpec(
            "Qwen/Qwen2.5-7B-Instruct", "sglang", cells, 3, 0, [str(SHARED_TOKENIZERS)], str(tmp_path)
        )
        ran: dict[str, list[str]] = {}

        def emit(harness, configuration, cell):
            ran[harness.name] = [r["stdout"] for r in cell["rollouts"]]

        group.run_group(spec, None, emit)  # type: ignore[arg-type]
        return ran

    alone = completions([("pydantic-ai", DEFAULT.name)])["pydantic-ai"]
    after = completions([("openai-agents-chat", DEFAULT.name), ("pydantic-ai", DEFAULT.name)])
    assert len(set(alone)) > 1  # the rollouts of one prompt differ (the engine counts what it was asked)
    assert after["pydantic-ai"] == alone and after["openai-agents-chat"] == alone
