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
        and "reached for CONNECT example.com:443" in (tmp_path / "harnesses.md").read_text()
    )


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
        with gateway_for(spec, {}) as url:
            cell = run_cell(spec, harness, DEFAULT, url, Runner(trap))
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
