"""Real agent harnesses, as they ship, against ``tito-audit serve`` with default options in front of the stand-in
engine (an engine on 127.0.0.1 that writes as Qwen3 does): no session id injected, nothing leaves the machine.

The PyPI frameworks (openai-agents over chat completions and over Responses, pydantic-ai, mini-swe-agent) run in the
suite, each in its own virtual environment under ``.venv/harnesses/`` (``make install`` puts them there: they pin
other versions of openai and pydantic than ours), as subprocesses. The npm CLIs (Codex CLI, Claude Code) run under
``make test-harnesses`` (CI runs it; it installs them and sets ``TITO_HARNESS_CLIS=1``; elsewhere their tests skip
saying so): ``codex exec`` with a model provider pointing at the gateway, ``claude -p`` with ``ANTHROPIC_BASE_URL``,
telemetry and updates off, and ``HTTP(S)_PROXY`` at a dead local port, so that any traffic elsewhere fails the run.
Each test finds its sessions through ``GET /sessions`` and reads their records: every request answered, every sampled
id in the loss of exactly one training sample, and what the harness did to its history.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
httpx = pytest.importorskip("httpx")

pytestmark = [
    requires_shared,
    pytest.mark.shared,
    pytest.mark.filterwarnings("ignore::tito_audit.session.TitoBreakWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
HARNESSES = ROOT / ".venv" / "harnesses"
DRIVERS = Path(__file__).resolve().parent / "harnesses"
MODEL = "Qwen/Qwen3-4B"
DEAD_PROXY = "http://127.0.0.1:9"
"""A local port nothing listens on: a harness that reaches for anything but the gateway fails there."""
RUN_SECONDS = 240


def offline_env(home: Path, **more: str) -> dict[str, str]:
    """The harness's environment: its own home, every proxy a dead local port but for loopback, telemetry off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "CODEX_", "CLAUDE_"))}
    env.update(
        HOME=str(home),
        HTTP_PROXY=DEAD_PROXY,
        HTTPS_PROXY=DEAD_PROXY,
        ALL_PROXY=DEAD_PROXY,
        http_proxy=DEAD_PROXY,
        https_proxy=DEAD_PROXY,
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        OPENAI_API_KEY="unused",
        OPENAI_AGENTS_DISABLE_TRACING="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        MSWEA_CONFIGURED="true",
        MSWEA_SILENT_STARTUP="1",
        DO_NOT_TRACK="1",
    )
    env.update(more)
    return env


def missing(what: str, install: str) -> None:
    """Skip (fail on CI, which installs every harness) when a harness is not installed."""
    message = f"{what} is not installed: {install}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def gateway_url():
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running
    from tito_audit.parse import sglang

    if not sglang.available():
        missing("SGLang's parsers", sglang.INSTALL)
    config = GatewayConfig(MODEL, engine="standin", mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    with running(Gateway(config)) as url:
        yield url


@pytest.fixture
def folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("This folder holds notes.\n", encoding="utf-8")
    (work / "notes.txt").write_text("TODO: read the README.\n", encoding="utf-8")
    return work


def sessions(url: str) -> dict[str, dict]:
    listed: dict[str, dict] = {}
    after = 0
    while True:
        page = httpx.get(f"{url}/sessions", params={"after": after, "limit": 100}, timeout=60).json()
        listed.update({s["session"]: s for s in page["sessions"]})
        if page["next"] is None:
            return listed
        after = page["next"]


def run(command: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_SECONDS)
    return done.returncode, (done.stdout + done.stderr)[-3000:]


def refusals(caplog) -> list[str]:
    """The gateway's one-line refusals logged so far (every 4xx and 5xx)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("gateway: ") and "(session" in r.getMessage()
    ]


def checked(url: str, session: str, output: str) -> dict:
    """A session's record, checked: every sampled id in the loss of exactly one of its training samples."""
    record = httpx.get(f"{url}/sessions/{session}", timeout=120).json()
    trainable = record["trainable"]
    assert trainable["sampled"] > 0 and trainable["in_loss"] == trainable["sampled"], (trainable, output)
    assert sum(b["trainable"]["in_loss"] for b in record["branches"]) == trainable["in_loss"]
    for branch in record["branches"]:
        owned = [t["completion"] for t in branch["turns"] if t["in_loss"] and t["sampled"]]
        assert sum(branch["loss_mask"]) == sum(end - start for start, end in owned)
    return record


def run_and_read(url: str, command: list[str], env: dict[str, str], cwd: Path, caplog) -> list[dict]:
    """Run a harness; the records of the sessions it opened (found through ``GET /sessions``), each checked."""
    caplog.set_level(logging.WARNING, logger="tito_audit.gateway")
    before = set(sessions(url))
    code, output = run(command, env, cwd)
    opened = [s for s in sessions(url) if s not in before]
    assert opened, f"the harness opened no session (exit {code}): {output}"
    said = refusals(caplog)
    return [{"refusals": said, "output": output, "exit": code, **checked(url, s, output)} for s in opened]


def venv_python(name: str) -> str:
    python = HARNESSES / f"venv-{name}" / "bin" / "python"
    if not python.is_file():
        missing(name, "make install (it installs the frameworks the suite runs into .venv/harnesses)")
    return str(python)


@pytest.mark.parametrize("dialect", ["chat", "responses"])
def test_openai_agents_without_a_session_id(gateway_url, folder, tmp_path, caplog, dialect):
    python = venv_python("openai-agents")
    command = [python, str(DRIVERS / "openai_agents_run.py"), gateway_url, dialect, str(folder)]
    (record,) = run_and_read(gateway_url, command, offline_env(tmp_path), folder, caplog)
    assert record["exit"] == 0, record["output"]
    assert record["refusals"] == [] and record["requests"] >= 2
    assert [f["how"] for f in record["found"]] == ["new"] + ["conversation"] * (record["requests"] - 1)
    assert len(record["branches"]) == 1  # it only appends


def test_pydantic_ai_without_a_session_id(gateway_url, folder, tmp_path, caplog):
    python = venv_python("pydantic-ai")
    command = [python, str(DRIVERS / "pydantic_ai_run.py"), gateway_url, str(folder)]
    (record,) = run_and_read(gateway_url, command, offline_env(tmp_path), folder, caplog)
    assert record["exit"] == 0, record["output"]
    assert record["refusals"] == [] and record["requests"] >= 2
    assert [f["how"] for f in record["found"]][1:] == ["conversation"] * (record["requests"] - 1)


def test_mini_swe_agent_without_a_session_id(gateway_url, folder, tmp_path, caplog):
    python = venv_python("mini-swe-agent")
    command = [python, str(DRIVERS / "mini_swe_agent_run.py"), gateway_url, str(folder)]
    (record,) = run_and_read(gateway_url, command, offline_env(tmp_path), folder, caplog)
    assert record["refusals"] == [] and record["requests"] >= 2, record["output"]
    assert [f["how"] for f in record["found"]][1:] == ["conversation"] * (record["requests"] - 1)


# -- recorded requests: a history the harness rewrote finds its session, and the branch names the harness ----------
RECORDED = Path(__file__).resolve().parent / "harnesses" / "recorded"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.json").read_text(encoding="utf-8"))


def answer_of(url: str, body: dict) -> tuple[str, dict]:
    """Post ``body`` (no session id): the session it opened or went on, and the answer's message."""
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()["tito"]["session"], answer.json()["choices"][0]["message"]


def second(pair: dict, answer: dict, rewritten: dict) -> dict:
    """The recorded second request with this run's answer, rewritten as the harness does, in its place (and the
    tool results answering its call ids)."""
    ids = dict(zip(pair.get("answer_call_ids", []), [c["id"] for c in answer.get("tool_calls") or []], strict=False))
    body = json.loads(json.dumps(pair["second"]))
    body["messages"] = [
        rewritten if m is None else {**m, "tool_call_id": ids[m["tool_call_id"]]} if m.get("tool_call_id") in ids else m
        for m in body["messages"]
    ]
    return body


def as_smolagents_text(answer: dict) -> dict:
    """The answer as smolagents 1.26 sends it back (its ``tool_role_conversions``: the call turn as text)."""
    calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])},
        }
        for c in answer["tool_calls"]
    ]
    text = (answer.get("content") or "") + ("\n" if answer.get("content") else "") + "Calling tools:\n" + str(calls)
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def as_inspect_ai_sends(answer: dict) -> dict:
    """The answer as inspect-ai 0.3.285 sends it back: a line break before its content, arguments re-spaced."""
    calls = [
        {**c, "function": {**c["function"], "arguments": json.dumps(json.loads(c["function"]["arguments"]))}}
        for c in answer["tool_calls"]
    ]
    message = {"role": "assistant", "content": "\n" + (answer.get("content") or ""), "tool_calls": calls}
    if answer.get("reasoning_content"):
        message["reasoning_content"] = answer["reasoning_content"]
    return message


def made_by(url: str, session: str) -> list[dict | None]:
    return [b["made_by"] for b in checked(url, session, "")["branches"]]


@pytest.mark.parametrize(
    ("name", "rewrite", "action"),
    [
        ("smolagents", as_smolagents_text, "rewrote an assistant turn as text"),
        ("inspect_ai", as_inspect_ai_sends, "edited a message"),
    ],
)
def test_an_answer_sent_back_rewritten_finds_its_rollouts_session(gateway_url, name, rewrite, action):
    """Two rollouts of one prompt (no session id), each answer sent back rewritten as the harness does: each goes on
    in its own session (the answer's call ids tell them apart), on a branch the harness is named for. Before, each
    request opened a session of its own that named no maker."""
    pair = recorded(name)
    first = json.loads(json.dumps(pair["first"]))
    first["tool_choice"] = "required"
    rollouts = [answer_of(gateway_url, first) for _ in range(2)]
    assert rollouts[0][0] != rollouts[1][0]
    for session, answer in reversed(rollouts):
        assert answer.get("tool_calls"), answer
        went_on, _ = answer_of(gateway_url, second(pair, answer, rewrite(answer)))
        assert went_on == session
        record = checked(gateway_url, session, "")
        assert [f["how"] for f in record["found"]] == ["new", "conversation"]
        assert made_by(gateway_url, session) == [None, {"maker": "harness", "action": action, "message": "messages[2]"}]


def test_a_malformed_turn_the_harness_drops_goes_on_in_its_session(gateway_url):
    """mini-swe-agent's text-based loop drops an answer without exactly one fenced action and sends the prompt again
    with a format error after it: the session whose last answer it dropped goes on, on a branch the harness is named
    for; when two sessions wait at that prompt nothing tells them apart: a session of its own, the harness its maker."""
    pair = recorded("mini_swe_agent_text")
    session, _ = answer_of(gateway_url, pair["first"])
    went_on, _ = answer_of(gateway_url, pair["second"])
    assert went_on == session
    assert made_by(gateway_url, session) == [
        None,
        {"maker": "harness", "action": "dropped a turn", "message": "messages[2]"},
    ]
    waiting = [answer_of(gateway_url, pair["first"])[0] for _ in range(2)]
    apart, _ = answer_of(gateway_url, pair["second"])
    assert apart not in waiting and apart != session
    record = checked(gateway_url, apart, "")
    assert record["found"][0]["how"] == "new" and "nothing tells them apart" in record["found"][0]["by"]
    assert made_by(gateway_url, apart) == [{"maker": "harness", "action": "dropped a turn", "message": "messages[2]"}]


def test_a_rows_summary_counts_each_break_and_answer_of_a_branched_session_once(gateway_url):
    """A session the harness branched lists its active branch's breaks at the top of its record and again in its
    branch, and at the top only its active branch's turns: the harness matrix's row counts each break and each
    answer sampled once (before, the active branch's breaks counted twice and the dropped answer not at all)."""
    from tito_audit.harnesses.group import summary

    pair = recorded("mini_swe_agent_text")
    named = {"X-Session-Id": "breaks-counted-once"}
    went_on = {"role": "user", "content": "<returncode>0</returncode>\n<output>README.md\nnotes.txt</output>"}
    body = pair["first"]
    for then in (pair["second"], None, None):
        answer = httpx.post(f"{gateway_url}/v1/chat/completions", json=body, headers=named, timeout=120)
        assert answer.status_code == 200, answer.text
        said = {"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"]}
        body = then or {**body, "messages": [*body["messages"], said, went_on]}
    record = checked(gateway_url, "breaks-counted-once", "")
    assert len(record["branches"]) == 2 and record["breaks"], record["breaks"]  # Qwen3's empty reasoning, dropped
    makers = summary(record)["break_makers"]
    assert len(makers) == sum(b["breaks"] for b in record["branches"])
    assert makers == [b["made_by"] for b in record["breaks"]]  # the first branch had no break to make
    assert summary(record)["turns"] == 3  # the answer the harness dropped, and the two on its new branch


# -- the npm CLIs -----------------------------------------------------------------------------------------------------
def npm_bin(name: str) -> str:
    """An npm CLI's binary; its tests run under ``make test-harnesses`` (CI runs it), which installs it."""
    if os.environ.get("TITO_HARNESS_CLIS") != "1":
        pytest.skip("the npm CLIs' runs take minutes: make test-harnesses runs them (CI does)")
    path = HARNESSES / "npm" / "node_modules" / ".bin" / name
    if not path.exists() or shutil.which("node") is None:
        missing(f"the {name} CLI", "make test-harnesses (npm)")
    return str(path)


def codex_home(tmp_path: Path, url: str, compact_limit: int | None = None) -> Path:
    home = tmp_path / "codex-home"
    home.mkdir()
    limit = f"model_auto_compact_token_limit = {compact_limit}\n" if compact_limit else ""
    (home / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "tito"\ncheck_for_update_on_startup = false\n{limit}\n'
        f'[model_providers.tito]\nname = "tito"\nbase_url = "{url}/v1"\nwire_api = "responses"\n\n'
        '[analytics]\nenabled = false\n\n[otel]\nexporter = "none"\n',
        encoding="utf-8",
    )
    return home


def test_codex_exec_finishes_a_task_with_default_features(gateway_url, folder, tmp_path, caplog):
    codex = npm_bin("codex")
    env = offline_env(tmp_path, CODEX_HOME=str(codex_home(tmp_path, gateway_url)))
    command = [codex, "exec", "--skip-git-repo-check", "Look at the files here and tell me what the README says."]
    records = run_and_read(gateway_url, command, env, folder, caplog)
    (record,) = records
    assert record["exit"] == 0, record["output"]
    assert record["refusals"] == [] and record["requests"] >= 4, record["output"]
    assert {f["by"] for f in record["found"]} == {"the session-id header"}
    assert any(name.startswith("tools[") and "web_search" in name for name in record["not_acted_on"])


CODEX_COMPACT_AT = 5600
"""Tokens past which Codex compacts (``model_auto_compact_token_limit``): its first prompt on Qwen3-4B is about 4,500
tokens and what it lists and reads of the folder below grows it past the limit, so it compacts, goes on from the
summary and finishes (at 4,000, under its own first prompt, it would compact at every turn, for ever)."""


def test_codex_auto_compaction_keeps_every_sampled_id_in_one_sample(gateway_url, folder, tmp_path, caplog):
    codex = npm_bin("codex")
    (folder / "README.md").write_text(
        "".join(f"Line {i}: notes of a small project, a topic a line.\n" for i in range(150))
    )
    for number in range(120):  # what it lists and reads grows its history past the limit: it compacts
        (folder / f"chapter_{number:03d}_of_the_notes_about_the_project.txt").write_text("x\n", encoding="utf-8")
    env = offline_env(tmp_path, CODEX_HOME=str(codex_home(tmp_path, gateway_url, compact_limit=CODEX_COMPACT_AT)))
    command = [codex, "exec", "--skip-git-repo-check", "Look at the files here and tell me what the README says."]
    (record,) = run_and_read(gateway_url, command, env, folder, caplog)
    assert record["exit"] == 0 and record["refusals"] == [], record["output"]
    actions = [(b["made_by"] or {}).get("action") for b in record["branches"]]
    assert "side request" in actions, actions  # the summary asked with no tools: a root of its own
    assert len(record["branches"]) >= 3, actions  # the loop, the summary request, the restart from the summary


def claude_env(tmp_path: Path, url: str) -> dict[str, str]:
    return offline_env(
        tmp_path,
        ANTHROPIC_BASE_URL=url,
        ANTHROPIC_API_KEY="unused",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )


def test_claude_code_finishes_a_task_with_default_tools(gateway_url, folder, tmp_path, caplog):
    claude = npm_bin("claude")
    command = [claude, "-p", "Look at the files here and tell me what the README says."]
    (record,) = run_and_read(gateway_url, command, claude_env(tmp_path, gateway_url), folder, caplog)
    assert record["exit"] == 0, record["output"]
    assert record["requests"] >= 4, record["output"]
    # Claude Code asks for 64,000 tokens, past Qwen3-4B's 40,960: refused in Anthropic's words, it asks again for fewer
    assert all("context_length_exceeded" in line for line in record["refusals"]), record["refusals"]
    assert {f["by"] for f in record["found"]} == {"metadata.user_id's session_id"}
    assert record["messages"][2]["role"] == "system"  # its system message inside messages, where it stands


def test_claude_code_compact_keeps_every_sampled_id_in_one_sample(gateway_url, folder, tmp_path, caplog):
    """``/compact`` in print mode on the last conversation: Claude Code sends the history again, its last answer
    dropped and its summary instruction ("Respond with TEXT ONLY") in the last user message; the stand-in engine
    answers it as a model would, with a summary in text, and Claude Code goes on from it."""
    claude = npm_bin("claude")
    env = claude_env(tmp_path, gateway_url)
    (record,) = run_and_read(gateway_url, [claude, "-p", "What does the README here say?"], env, folder, caplog)
    for prompt in ("/compact", "And what does notes.txt say?"):
        code, output = run([claude, "-p", "--continue", prompt], env, folder)
        assert code == 0, output
    after = checked(gateway_url, record["session"], output)
    assert after["requests"] > record["requests"] and len(after["branches"]) >= 2
    summaries = [m for b in after["branches"] for m in b["messages"] if "<summary>" in str(m.get("content"))]
    assert summaries, "the summary came back empty"
    assert all("context_length_exceeded" in line for line in refusals(caplog)), refusals(caplog)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
