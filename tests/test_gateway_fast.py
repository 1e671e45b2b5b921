"""The gateway on ``--bridge auto`` (its default): tool turns are bridged from the short local render (each turn's
record says so, and how many steps wait for the full check), the full check runs when a session's record is read,
never on a turn's request, and the record says whether it ran and what it found, without changing the session."""

from __future__ import annotations

import json

import pytest

from tests import templates
from tests.test_session import TOOLS
from tests.test_session_fast import ALERT, REDACTS_AFTER_ALERT

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
httpx = pytest.importorskip("httpx")

TURNS = 6
MARKED = 3
"""The turn after which the agent's tool result holds the mark the template redacts earlier results for."""


@pytest.fixture(scope="module")
def gateways(tiny_model_dir, tmp_path_factory):
    """A gateway per template (``GOOD`` and ``REDACTS_AFTER_ALERT``), on the tiny tokenizer, the fake engine."""
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    folder = tmp_path_factory.mktemp("gateway-fast")
    urls = {}
    with_servers = []
    for name, source in (("GOOD", templates.GOOD), ("REDACTS_AFTER_ALERT", REDACTS_AFTER_ALERT)):
        path = folder / f"{name}.jinja"
        path.write_text(source, encoding="utf-8")
        config = GatewayConfig(str(tiny_model_dir), template=str(path), allow_hub=False, parser="template", seed=3)
        gateway = Gateway(config)
        assert config.bridge == "auto" and "proved history-free" in gateway.prove()
        server = running(gateway)
        urls[name] = server.__enter__()
        with_servers.append(server)
    yield urls
    for server in with_servers:
        server.__exit__(None, None, None)


def agent(url: str, session: str, mark_at: int | None = None) -> list[dict]:
    """``TURNS`` tool turns (the tool result after turn ``mark_at`` holds the mark); the turns' ``tito`` records."""
    return agent_turns(url, session, mark_at)[1]


def agent_turns(url: str, session: str, mark_at: int | None = None) -> tuple[list[dict], list[dict]]:
    """:func:`agent`'s turns: the conversation after them (the last tool results included) and the records."""
    messages: list[dict] = [{"role": "user", "content": "Check the cities."}]
    records = []
    for turn in range(1, TURNS + 1):
        body = {"model": "m", "messages": messages, "tools": TOOLS, "tool_choice": "required"}
        response = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": session}, timeout=60)
        assert response.status_code == 200, response.text
        answer = response.json()
        message = {k: v for k, v in answer["choices"][0]["message"].items() if v is not None}
        records.append(answer["tito"])
        content = f"Sunny, {turn}C" + (f" {ALERT}" if turn == mark_at else "")
        messages += [message] + [
            {"role": "tool", "tool_call_id": call["id"], "content": content} for call in message["tool_calls"]
        ]
    return messages, records


def test_tool_turns_are_bridged_locally_and_checked_when_the_record_is_read(gateways):
    url = gateways["GOOD"]
    records = agent(url, "fast-good")
    assert [r["bridged"] for r in records[1:]] == ["local"] * (TURNS - 1)
    assert [r["unchecked_steps"] for r in records[1:]] == list(range(1, TURNS))
    record = httpx.get(f"{url}/sessions/fast-good").json()
    assert record["check"] == {"ran": True, "at": "record", "steps": list(range(1, TURNS)), "found": None}
    assert not record["breaks"] and [t["bridged"] for t in record["turns"][:-1]] == ["local"] * (TURNS - 1)


def test_the_record_reports_a_break_the_check_finds_and_the_session_stays_as_it_was(gateways):
    url = gateways["REDACTS_AFTER_ALERT"]
    records = agent(url, "fast-alert", mark_at=MARKED)
    assert all(not r["breaks"] for r in records)  # no turn's request renders the history
    first = httpx.get(f"{url}/sessions/fast-alert").json()
    found = first["check"]["found"]
    assert first["check"]["ran"] and found is not None
    # the step that appended the marked result, found late, with the per-turn check's label and owner
    assert (found["step"], found["found_at"], found["causes"]) == (MARKED, "check", ["content-rewritten"])
    assert found["message_role"] == "tool" and "[redacted]" in found["template_text"]
    assert [b["step"] for b in first["breaks"]] == [MARKED]  # --on-break warn: recorded, the buffer kept
    again = httpx.get(f"{url}/sessions/fast-alert").json()  # the session itself was not changed: same check again
    assert again["check"] == first["check"] and again["buffer"] == first["buffer"]


# -- the session's lock and reservation on the paths --bridge auto added (issue 42's guarantee, after the merge) -------
@pytest.mark.parametrize(("stream", "on_rewrite"), [(False, "refuse"), (True, "refuse"), (False, "branch")])
def test_a_break_found_late_leaves_no_lock_no_reservation_and_the_session_as_it_was(
    tiny_model_dir, tmp_path, stream, on_rewrite
):
    """Under ``--on-break raise``, tool turns bridged from the local render go through; the user turn after them is
    rendered whole, its check finds the break of an earlier turn (``found at step N``) and is refused (422), streamed
    or not, on the session or on its tree (``--on-rewrite branch``, the step tried on a fork of the branch's tip):
    the session's lock is free, its reservation given back, the session and the server's bytes as they were, and the
    same request is answered the same way again."""
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    path = tmp_path / "redacts.jinja"
    path.write_text(REDACTS_AFTER_ALERT, encoding="utf-8")
    settings = {"parser": "template", "on_break": "raise", "on_rewrite": on_rewrite, "seed": 3}
    config = GatewayConfig(str(tiny_model_dir), template=str(path), allow_hub=False, **settings)
    served = Gateway(config)
    with running(served) as url:
        messages, records = agent_turns(url, "late", mark_at=MARKED)
        assert [r["bridged"] for r in records[1:]] == ["local"] * (TURNS - 1) and not any(r["breaks"] for r in records)
        entry = served.store.get("late")
        kept = httpx.get(f"{url}/sessions/late", timeout=60).json()
        total = served.store.total_bytes
        body = {"model": "m", "messages": [*messages, {"role": "user", "content": "Sum it up."}], "tools": TOOLS}
        body["stream"] = stream
        for _ in range(2):
            refused = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": "late"}, timeout=60)
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["code"] == "tito_break" and f"at step {MARKED} " in error["message"]
            assert f"found at step {TURNS}" in error["message"]  # the user turn's render found it
            assert not entry.lock.locked() and entry.reserved == 0
            assert served.store.get("late") is entry and served.store.total_bytes == total
        again = httpx.get(f"{url}/sessions/late", timeout=60).json()
        assert (again["buffer"], again["requests"], again["messages"]) == (
            kept["buffer"],
            kept["requests"],
            kept["messages"],
        )


def test_a_streamed_turn_records_its_bridge_and_cpu_time(gateways):
    """A streamed turn's ``tito`` record (the last chunk's) carries what an unstreamed one does: how its bridge was
    made, how many steps wait for the check, and the CPU time of the gateway's own work."""
    url = gateways["GOOD"]
    messages, _ = agent_turns(url, "fast-streamed")
    body = {"model": "m", "messages": messages, "tools": TOOLS, "stream": True}
    streamed = httpx.post(
        f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": "fast-streamed"}, timeout=60
    )
    assert streamed.status_code == 200, streamed.text
    chunks = [json.loads(line[5:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    tito = next(chunk["tito"] for chunk in reversed(chunks) if "tito" in chunk)
    assert tito["bridged"] == "local" and tito["unchecked_steps"] == TURNS
    assert tito["gateway_cpu_ms"] > 0


@pytest.mark.parametrize("bridge", ["template", "auto"])
def test_serve_says_what_its_bridge_covers_in_one_line(tiny_model_dir, tmp_path, bridge):
    """``serve`` prints, before the first request, one line for its bridge: what the proof covers under ``auto``,
    that there is nothing to prove otherwise (before: ``bridge template: bridge template: ...``)."""
    import queue
    import signal
    import subprocess
    import sys
    import threading

    path = tmp_path / "good.jinja"
    path.write_text(templates.GOOD, encoding="utf-8")
    command = [sys.executable, "-m", "tito_audit", "serve", str(tiny_model_dir), "--template", str(path)]
    command += ["--engine", "fake", "--parser", "template", "--port", "0", "--no-hub", "--bridge", bridge]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in server.stderr], daemon=True).start()
    try:
        said = ""
        while not said.startswith("bridge "):
            said = lines.get(timeout=60)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    if bridge == "template":
        assert said == "bridge template: every step as that bridge makes it (nothing to prove)\n"
    else:
        assert said.startswith("bridge auto: tool steps proved history-free (with tools) over ")
