"""``--store``: sessions in SQLite. A server started again on the file continues every session with the same record
(buffer, mask, log-probabilities, turns, breaks, messages) and answers the next turn; a server killed with SIGKILL
under concurrent load loses no turn it answered; an ended session leaves the file; a write that fails is 507 and
changes nothing; a second server on the same file, a file of another model, a folder are refused in one line."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
openai = pytest.importorskip("openai", reason="the openai client is not installed (pip install -e '.[dev]')")
httpx = pytest.importorskip("httpx")

pytestmark = [requires_shared, pytest.mark.shared]

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture(scope="module")
def machinery():
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    return machinery_for(MODEL, source, None, ())


def gateway_on(store: Path, machinery=None, **options):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig

    options.setdefault("parser", "template")
    return Gateway(GatewayConfig(options.pop("model", MODEL), seed=5, store=store, **options), machinery=machinery)


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)


def next_messages(messages: list[dict], answer: dict, turn: int) -> list[dict]:
    """What an agent sends next: the answer as it got it, then tool results or a user turn."""
    calls = answer.get("tool_calls") or []
    after = [{"role": "tool", "tool_call_id": c["id"], "content": f"result {turn}"} for c in calls]
    return [*messages, answer, *(after or [{"role": "user", "content": f"go on ({turn})"}])]


def chat(url: str, session: str, messages: list[dict], **more) -> httpx.Response:
    body = {"messages": messages, "tools": TOOLS, **more}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": session}, timeout=60)


def test_a_restarted_server_continues_every_session_with_the_same_record(tmp_path, machinery):
    from tito_audit.gateway.server import running

    store = tmp_path / "sessions.db"
    conversations: dict[str, list[dict]] = {}
    with running(gateway_on(store, machinery)) as url:
        for name, turns in (("a", 3), ("b", 1), ("c", 2)):
            messages: list[dict] = [{"role": "user", "content": f"Weather for {name}?"}]
            for turn in range(turns):
                answer = chat(url, name, messages, logprobs=True)
                assert answer.status_code == 200, answer.text
                messages = next_messages(messages, answer.json()["choices"][0]["message"], turn)
            conversations[name] = messages
        assert chat(url, "c", conversations["c"][:-2]).json()["tito"]["retry"] is True  # a retry is a turn too
        records = {name: httpx.get(f"{url}/sessions/{name}").json() for name in conversations}
    assert {p.name for p in tmp_path.iterdir()} == {"sessions.db"}  # a clean stop folds the WAL back

    with running(gateway_on(store, machinery)) as url:
        assert httpx.get(f"{url}/healthz").json()["sessions"] == 3
        for name, messages in conversations.items():
            assert httpx.get(f"{url}/sessions/{name}").json() == records[name]
            answer = chat(url, name, messages)
            assert answer.status_code == 200, answer.text
            assert answer.json()["tito"]["turn"] == len(records[name]["turns"]) + 1
            after = httpx.get(f"{url}/sessions/{name}").json()
            assert after["buffer"][: len(records[name]["buffer"])] == records[name]["buffer"]
            assert after["logprobs"][: len(records[name]["logprobs"])] == records[name]["logprobs"]
        assert httpx.delete(f"{url}/sessions/b").status_code == 200
        records = {name: httpx.get(f"{url}/sessions/{name}").json() for name in ("a", "c")}

    with running(gateway_on(store, machinery)) as url:
        assert httpx.get(f"{url}/sessions/b").status_code == 404  # deleted from the file with the DELETE
        assert {name: httpx.get(f"{url}/sessions/{name}").json() for name in ("a", "c")} == records


def test_breaks_and_a_rerendered_buffer_come_back_whole(tmp_path):
    """Qwen3-4B rewrites an earlier turn once a user speaks again; under rerender the buffer restarts from the
    template's render: the change written is no longer an append."""
    from tito_audit.gateway.server import running

    store = tmp_path / "q3.db"
    options = {"model": "Qwen/Qwen3-4B", "on_break": "rerender", "mirrors": [SHARED_TOKENIZERS], "allow_hub": False}
    messages: list[dict] = [{"role": "user", "content": "Hi there"}]
    with running(gateway_on(store, **options)) as url:
        for turn in range(8):
            answer = httpx.post(
                f"{url}/v1/chat/completions", json={"messages": messages}, headers={"X-Session-Id": "r"}
            )
            assert answer.status_code == 200, answer.text
            if answer.json()["tito"]["breaks"]:
                break
            messages = next_messages(messages, answer.json()["choices"][0]["message"], turn)
        else:
            pytest.fail("no break in 8 turns")
        record = httpx.get(f"{url}/sessions/r").json()
    assert record["breaks"] and any(t["broke"] for t in record["turns"])
    with running(gateway_on(store, **options)) as url:
        assert httpx.get(f"{url}/sessions/r").json() == record


def test_a_failed_write_is_507_and_changes_nothing(tmp_path, machinery):
    from tito_audit.gateway.server import running

    gateway = gateway_on(tmp_path / "s.db", machinery)
    with running(gateway) as url:
        messages = [{"role": "user", "content": "hi"}]
        first = chat(url, "w", messages)
        before = httpx.get(f"{url}/sessions/w").json()
        gateway.durable._connection.close()  # the file can no longer be written
        failed = chat(url, "w", next_messages(messages, first.json()["choices"][0]["message"], 0))
        assert failed.status_code == 507
        error = failed.json()["error"]
        assert error["code"] == "store_failed" and error["type"] == "server_error" and "--store" in error["message"]
        assert httpx.get(f"{url}/sessions/w").json() == before
        assert chat(url, "new", messages).status_code == 507  # a first turn that cannot be stored opens nothing
        assert httpx.get(f"{url}/sessions/new").status_code == 404


def test_ended_sessions_leave_the_file_and_the_file_takes_the_umask(tmp_path, machinery):
    from tito_audit.gateway.server import running

    store = tmp_path / "s.db"
    old = os.umask(0o002)
    try:
        gateway = gateway_on(store, machinery, max_sessions=2)
    finally:
        os.umask(old)
    with running(gateway) as url:
        for name in ("a", "b", "c"):  # "a" is evicted when "c" opens
            assert chat(url, name, [{"role": "user", "content": name}]).status_code == 200
        assert (store.stat().st_mode & 0o777) == 0o664
        gateway.give_back()  # what the sweeper does: the ended session's memory, and its rows
    with sqlite3.connect(store) as connection:  # the server has let go of the file (it holds it while it runs)
        names = {row[0] for row in connection.execute("SELECT id FROM sessions")}
    assert names == {"b", "c"}


def test_the_store_is_refused_in_one_line_where_it_cannot_serve(tmp_path, machinery):
    from tito_audit.errors import BadInputError

    with pytest.raises(BadInputError, match="is a folder"):
        gateway_on(tmp_path, machinery)
    with pytest.raises(BadInputError, match=r"branches \(--on-rewrite branch\) are kept in memory only"):
        gateway_on(tmp_path / "branches.db", machinery, on_rewrite="branch")
    (tmp_path / "junk.db").write_text("not a database, just text " * 100)
    with pytest.raises(BadInputError, match="not a session store"):
        gateway_on(tmp_path / "junk.db", machinery)
    first = gateway_on(tmp_path / "s.db", machinery)
    try:
        with pytest.raises(BadInputError, match="in use by another server process"):
            gateway_on(tmp_path / "s.db", machinery)
    finally:
        first.close_store()
    with pytest.raises(BadInputError, match=r"sessions of Qwen/Qwen2.5-7B-Instruct made with other settings"):
        gateway_on(tmp_path / "s.db", model="Qwen/Qwen3-4B", mirrors=[SHARED_TOKENIZERS], allow_hub=False)


# -- kill -9 under load --------------------------------------------------------------------------------------------
SESSIONS = 16


def serve_command(store: Path, port: int) -> list[str]:
    command = [sys.executable, "-m", "tito_audit", "serve", MODEL, "--mirror", str(SHARED_TOKENIZERS), "--no-hub"]
    return [*command, "--parser", "template", "--port", str(port), "--store", str(store), "--seed", "3"]


def serve(store: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen(serve_command(store, port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_up(server: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the server stopped: {server.stderr.read() if server.stderr else ''}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    pytest.fail("the server did not start within 90 s")


class Agent(threading.Thread):
    """One session's agent: turns until the server goes away; keeps what each answered turn said."""

    def __init__(self, url: str, index: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.name_, self.stop = url, f"k-{index:02d}", stop
        self.messages: list[dict] = [{"role": "user", "content": f"[{index}] Weather, then the build."}]
        self.answered: list[dict] = []  # per answered turn: its tito record
        self.in_flight: list[dict] | None = None

    def run(self) -> None:
        with httpx.Client(timeout=30) as http:
            while not self.stop.is_set() and len(self.answered) < 200:
                self.in_flight = self.messages
                try:
                    response = http.post(
                        f"{self.url}/v1/chat/completions",
                        json={"messages": self.messages, "tools": TOOLS},
                        headers={"X-Session-Id": self.name_},
                    )
                except httpx.HTTPError:
                    return  # the server went away with this request under way
                if response.status_code != 200:
                    return
                body = response.json()
                self.answered.append(body["tito"])
                self.messages = next_messages(self.messages, body["choices"][0]["message"], len(self.answered))
                self.in_flight = None


def test_kill_9_under_load_loses_no_answered_turn(tmp_path):
    from tito_audit.gateway.server import free_port

    store, port = tmp_path / "load.db", free_port()
    url = f"http://127.0.0.1:{port}"
    server = serve(store, port)
    try:
        wait_up(server, url)
        second = subprocess.run(serve_command(store, free_port()), capture_output=True, text=True, timeout=90)
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 2 and len(lines) == 1 and "in use by another server process" in lines[0]
        stop = threading.Event()
        agents = [Agent(url, i, stop) for i in range(SESSIONS)]
        for agent in agents:
            agent.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            min(len(a.answered) for a in agents) < 2 or sum(len(a.answered) for a in agents) < 20 * SESSIONS
        ):
            time.sleep(0.05)
        os.kill(server.pid, signal.SIGKILL)  # mid-load: requests under way, turns being written
        server.wait(timeout=10)
        stop.set()
        for agent in agents:
            agent.join(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
    answered = {a.name_: len(a.answered) for a in agents}
    assert min(answered.values()) >= 2

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = serve(store, port)
    unanswered = 0
    try:
        wait_up(server, url)
        for agent in agents:
            record = httpx.get(f"{url}/sessions/{agent.name_}").json()
            turns = record["turns"]
            # every answered turn is there, where the answer said its completion went; at most one more (written,
            # not answered: the server died before the answer went out)
            assert len(turns) in (len(agent.answered), len(agent.answered) + 1), agent.name_
            unanswered += len(turns) - len(agent.answered)
            for kept, tito in zip(turns, agent.answered, strict=False):
                assert kept["completion"] == [tito["prompt_tokens"], tito["prompt_tokens"] + tito["completion_ids"]]
            # the agent sends again what was under way (or its next turn): the session goes on
            messages = agent.in_flight if agent.in_flight is not None else agent.messages
            response = chat(url, agent.name_, messages)
            assert response.status_code == 200, (agent.name_, response.text)
            assert response.json()["tito"]["turn"] == len(agent.answered) + 1
        health = httpx.get(f"{url}/healthz").json()
        assert health["sessions"] == SESSIONS and health["store"] == str(store)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
    print(
        f"kill -9: {SESSIONS} sessions, {sum(answered.values())} answered turns before; after the restart all of them "
        f"and {unanswered} written but never answered; every session answered its next turn"
    )
