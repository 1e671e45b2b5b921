"""What real clients send, as fixtures written from each client's documented request shapes (and checked against
what Codex CLI 0.171.0 and Claude Code 2.1.197 send as they ship): the requests the gateway refused before
(``tools[4]: only function tools``, ``messages[1].role: user or assistant``, a 404 on a canned assistant turn, a
409 on a title request under the agent's session, a 404 on every request without a session id), each served with
default options; and the record that says how each request found its session, what the harness did, and that every
sampled id is in the loss of exactly one training sample."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
httpx = pytest.importorskip("httpx")

pytestmark = [
    requires_shared,
    pytest.mark.shared,
    pytest.mark.filterwarnings("ignore::tito_audit.session.TitoBreakWarning"),  # the response reports it
]

MODEL = "Qwen/Qwen2.5-7B-Instruct"
READ = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
TIMEOUT = 60


@pytest.fixture(scope="module")
def machinery():
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    return machinery_for(MODEL, source, None, ())


def served(machinery, **settings):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    return running(Gateway(GatewayConfig(MODEL, parser="template", seed=11, **settings), machinery=machinery))


def post(url: str, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers=headers or {}, timeout=TIMEOUT)


def record(url: str, session: str) -> dict:
    answer = httpx.get(f"{url}/sessions/{session}", timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    return answer.json()


def each_id_once(record: dict) -> None:
    """Every sampled id of the session is in the loss of exactly one of its samples, and nothing else is."""
    branches = record.get("branches") or [record]
    assert sum(b["trainable"]["in_loss"] for b in branches) == record["trainable"]["in_loss"]
    assert record["trainable"]["in_loss"] == record["trainable"]["sampled"], record["trainable"]
    for branch in branches:
        owned = [t["completion"] for t in branch["turns"] if t["in_loss"] and t["sampled"]]
        assert sum(branch["loss_mask"]) == sum(end - start for start, end in owned)


def chat_message(answer: httpx.Response) -> dict:
    assert answer.status_code == 200, answer.text
    return {k: v for k, v in answer.json()["choices"][0]["message"].items() if v is not None}


def tool_results(message: dict, text: str = "done") -> list[dict]:
    return [{"role": "tool", "tool_call_id": c["id"], "content": text} for c in message.get("tool_calls") or []]


# -- Codex CLI: Responses with a namespace tool, a hosted tool, reasoning items, its session-id header ---------------
CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "description": "Run a command.", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"],
                    "additionalProperties": False}},
    {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
     "tools": [{"type": "function", "name": "close_agent", "description": "Close an agent.", "strict": False,
                "parameters": {"type": "object", "properties": {"target": {"type": "string"}},
                               "required": ["target"], "additionalProperties": False}}]},
    {"type": "web_search", "external_web_access": False},
]  # fmt: skip


def codex_body(items: list[dict], **more) -> dict:
    return {
        "model": "Qwen/Qwen3-4B",
        "instructions": "",
        "input": items,
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "codex-thread",
        "client_metadata": {"turn_id": "t1"},
        **more,
    }


def test_codex_namespace_tools_are_offered_and_their_calls_answered_with_the_namespace(machinery):
    items = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "You are a coding agent."}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Close agent a1."}]},
    ]
    headers = {"session-id": "codex-1", "thread-id": "codex-1"}
    with served(machinery) as url:
        first = post(url, "/v1/responses", codex_body(items, tool_choice={"type": "function", "name": "close_agent"}),
                     headers)  # fmt: skip
        assert first.status_code == 200, first.text  # was 400: tools[1]: only function tools
        calls = [item for item in first.json()["output"] if item["type"] == "function_call"]
        assert calls and all(c["name"] == "close_agent" and c["namespace"] == "multi_agent_v1" for c in calls)
        echoed = first.json()["output"]  # Codex sends its output items back, each call with its namespace
        outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": [
            {"type": "input_text", "text": "closed"}]} for c in calls]  # fmt: skip
        reasoning = {"type": "reasoning", "summary": [], "content": None, "encrypted_content": None}
        second = post(url, "/v1/responses", codex_body([*items, reasoning, *echoed, *outputs]), headers)
        assert second.status_code == 200, second.text
        kept = record(url, "codex-1")
    assert [f["by"] for f in kept["found"]] == ["the session-id header"] * 2
    assert set(kept["not_acted_on"]) >= {"parallel_tool_calls", "reasoning", "include", "store", "client_metadata"}
    assert any(name.startswith("tools[2] (web_search") for name in kept["not_acted_on"])
    assert len(kept["branches"]) == 1 and len(kept["turns"]) == 2  # the session only grew
    each_id_once(kept)


# -- Claude Code: a system message inside messages, its metadata.user_id, fields it does not act on -----------------
def claude_body(messages: list[dict], session: str = "cc-7") -> dict:
    user_id = json.dumps({"device_id": "d" * 16, "account_uuid": "", "session_id": session})
    return {
        "model": "claude-opus-4-8",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
        "tools": [{"name": "Read", "description": "Read a file.", "input_schema": READ["function"]["parameters"]}],
        "metadata": {"user_id": user_id},
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "stream": False,
    }


CLAUDE_OPENING = [
    {"role": "user", "content": [{"type": "text", "text": "<system-reminder>context</system-reminder>"},
                                 {"type": "text", "text": "Read a.txt", "cache_control": {"type": "ephemeral"}}]},
    {"role": "system", "content": "Available agent types: Explore."},
]  # fmt: skip


def test_claude_code_system_messages_inside_messages_are_rendered_where_they_stand(machinery):
    with served(machinery) as url:
        first = post(url, "/v1/messages", claude_body(CLAUDE_OPENING))
        assert first.status_code == 200, first.text  # was 400: messages[1].role: user or assistant
        answer = {"role": "assistant", "content": first.json()["content"]}
        uses = [b for b in first.json()["content"] if b["type"] == "tool_use"]
        results = [{"type": "tool_result", "tool_use_id": b["id"], "content": "text of a.txt"} for b in uses]
        follow = {"role": "user", "content": results or [{"type": "text", "text": "Go on."}]}
        moved = [
            {"type": "text", "text": "<system-reminder>context</system-reminder>"},
            {"type": "text", "text": "Read a.txt"},
        ]
        opening = [{**CLAUDE_OPENING[0], "content": moved}, CLAUDE_OPENING[1]]
        second = post(url, "/v1/messages", claude_body([*opening, answer, follow]))  # cache_control moved: the same
        assert second.status_code == 200, second.text
        kept = record(url, "cc-7")  # the session_id of Claude Code's metadata.user_id
    assert [m["role"] for m in kept["messages"][:3]] == ["system", "user", "system"]
    assert [f["by"] for f in kept["found"]] == ["metadata.user_id's session_id"] * 2
    assert set(kept["not_acted_on"]) == {"thinking", "context_management", "output_config"}
    assert len(kept["branches"]) == 1
    each_id_once(kept)


def test_a_template_that_refuses_a_system_message_inside_is_one_422_naming_the_clients_message(machinery, tmp_path):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    template = tmp_path / "first-system-only.jinja"
    template.write_text(
        "{%- for m in messages %}{%- if m.role == 'system' and not loop.first %}"
        "{{ raise_exception('System messages come first.') }}{%- endif %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
        "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}",
        encoding="utf-8",
    )
    config = GatewayConfig(MODEL, parser="template", template=template, mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    with running(Gateway(config)) as url:
        refused = post(url, "/v1/messages", claude_body(CLAUDE_OPENING))
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "template_refused"
    message = refused.json()["error"]["message"]
    assert message.startswith("messages[1]: ") and "System messages come first." in message and "\n" not in message


# -- qwen-code: a canned assistant turn nobody sampled, and no session id -------------------------------------------
def test_a_canned_assistant_turn_is_context_and_the_next_request_finds_its_session(machinery):
    opening = [
        {"role": "system", "content": "You are Qwen Code."},
        {"role": "user", "content": "This is the context: a folder with a.txt."},
        {"role": "assistant", "content": "Got it. Thanks for the context!"},
        {"role": "user", "content": "Read a.txt"},
    ]
    with served(machinery) as url:
        body = {"messages": opening, "tools": [READ], "tool_choice": "required"}
        first = chat_message(post(url, "/v1/chat/completions", body))  # was 404 unknown_session
        session = httpx.get(f"{url}/sessions", timeout=TIMEOUT).json()["sessions"][0]["session"]
        follow = [*opening, first, *tool_results(first)]
        second = post(url, "/v1/chat/completions", {"messages": follow, "tools": [READ]})
        assert second.status_code == 200 and second.json()["tito"]["session"] == session
        kept = record(url, session)
    assert kept["unsampled"] == [2]  # the canned turn: rendered, never in the loss
    assert [f["how"] for f in kept["found"]] == ["new", "conversation"]
    each_id_once(kept)


# -- opencode: a title request (no tools) under the agent's own x-session-id, then the loop -------------------------
def test_a_side_request_under_the_agents_session_is_a_branch_of_its_own(machinery):
    headers = {"x-session-id": "ses_open"}
    with served(machinery) as url:
        title = {
            "messages": [{"role": "system", "content": "Write a title."}, {"role": "user", "content": "Read a.txt"}]
        }
        assert post(url, "/v1/chat/completions", title, headers).status_code == 200
        loop = [{"role": "system", "content": "You are opencode."}, {"role": "user", "content": "Read a.txt"}]
        first = chat_message(post(url, "/v1/chat/completions", {"messages": loop, "tools": [READ],
                                                                 "tool_choice": "required"}, headers))  # fmt: skip
        second = post(url, "/v1/chat/completions",
                      {"messages": [*loop, first, *tool_results(first)], "tools": [READ]}, headers)  # fmt: skip
        assert second.status_code == 200, second.text  # was 409: tools differ from the session's
        kept = record(url, "ses_open")
    side, agent = kept["branches"]
    assert side["made_by"] == {"maker": "harness", "action": "side request", "message": None}
    assert agent["parent"] is None and len(agent["turns"]) == 2
    each_id_once(kept)


# -- a compaction: the history sent with no tools for a summary, then a restart from it -----------------------------
def test_a_compaction_keeps_every_sampled_id_in_exactly_one_sample(machinery):
    headers = {"session-id": "compacting"}
    system = {"role": "system", "content": "You read files."}
    messages = [system, {"role": "user", "content": "Read a.txt, b.txt and c.txt"}]
    with served(machinery) as url:
        for turn in range(3):
            answer = chat_message(post(url, "/v1/chat/completions", {"messages": messages, "tools": [READ],
                                                                      "tool_choice": "required"}, headers))  # fmt: skip
            messages += [answer, *tool_results(answer, f"line {turn}")]
        summary_request = [*messages, {"role": "user", "content": "Summarize the conversation so far."}]
        summary = chat_message(post(url, "/v1/chat/completions", {"messages": summary_request}, headers))
        restart = [system, {"role": "user", "content": "Read a.txt, b.txt and c.txt"},
                   {"role": "user", "content": f"Summary of earlier work: {summary.get('content', '')}"}]  # fmt: skip
        after = chat_message(post(url, "/v1/chat/completions", {"messages": restart, "tools": [READ]}, headers))
        final = [*restart, after, *(tool_results(after) or [{"role": "user", "content": "ok"}])]
        assert post(url, "/v1/chat/completions", {"messages": final, "tools": [READ]}, headers).status_code == 200
        kept = record(url, "compacting")
    makers = [b["made_by"] for b in kept["branches"]]
    assert makers[0] is None and makers[1]["action"] == "side request" and makers[2]["action"] == "summarized"
    assert makers[2]["message"] == "messages[2]"
    assert kept["requests"] == 6 and kept["trainable"]["lost"] == {}
    each_id_once(kept)


# -- a harness that resends its calls as text (smolagents' ToolCallingAgent) --------------------------------------
def test_calls_resent_as_text_open_a_branch_the_harness_is_named_for(machinery):
    with served(machinery) as url:
        messages = [{"role": "user", "content": "Read a.txt"}]
        body = {"messages": messages, "tools": [READ], "tool_choice": "required"}
        first = chat_message(post(url, "/v1/chat/completions", body, {"x-session-id": "smol"}))
        as_text = {"role": "assistant", "content": "Calling tools:\n" + str([
            {"id": c["id"], "type": "function", "function": {"name": c["function"]["name"],
             "arguments": json.loads(c["function"]["arguments"])}} for c in first["tool_calls"]])}  # fmt: skip
        rewritten = [*messages, as_text, {"role": "user", "content": "Observation:\ntext of a.txt"}]
        answer = post(url, "/v1/chat/completions", {"messages": rewritten, "tools": [READ]}, {"x-session-id": "smol"})
        assert answer.status_code == 200, answer.text  # was 409
        kept = record(url, "smol")
    branch = kept["branches"][1]
    assert branch["made_by"] == {
        "maker": "harness",
        "action": "rewrote an assistant turn as text",
        "message": "messages[1]",
    }
    assert branch["unsampled"] == [1] and [t["in_loss"] for t in branch["turns"]] == [False, True]
    each_id_once(kept)


# -- frameworks that send no session id: rollouts of one prompt, told apart by their answers ------------------------
def test_rollouts_without_a_session_id_are_told_apart_and_listed(machinery):
    prompt = [{"role": "user", "content": "Read a.txt"}]
    with served(machinery) as url:
        body = {"messages": prompt, "tools": [READ], "tool_choice": "required"}
        firsts = [chat_message(post(url, "/v1/chat/completions", body)) for _ in range(3)]
        sessions = [s["session"] for s in httpx.get(f"{url}/sessions", timeout=TIMEOUT).json()["sessions"]]
        assert len(sessions) == 3  # a first request always opens a new session, even with equal messages
        for first in reversed(firsts):  # each rollout goes on, in another order than it began
            follow = [*prompt, first, *tool_results(first)]
            assert post(url, "/v1/chat/completions", {"messages": follow, "tools": [READ]}).status_code == 200
        page = httpx.get(f"{url}/sessions?limit=2", timeout=TIMEOUT).json()
        rest = httpx.get(f"{url}/sessions?limit=2&after={page['next']}", timeout=TIMEOUT).json()
        listed = page["sessions"] + rest["sessions"]
        assert [s["session"] for s in listed] == sessions and rest["next"] is None
        kept = [record(url, s) for s in sessions]
    distinct = len({json.dumps(f["tool_calls"], sort_keys=True) for f in firsts}) == 3
    for session in kept:
        assert session["requests"] == 2 and len(session["branches"]) == (1 if distinct else session["requests"] - 1)
        assert session["found"][1]["how"] == "conversation"
        each_id_once(session)
    assert all(s["trainable"]["sampled"] == s["trainable"]["in_loss"] > 0 for s in listed)


# -- refusals: the client's own numbering, a status the SDKs do not retry, one log line ------------------------------
def test_a_refused_edit_names_the_clients_message_and_is_logged_in_one_line(machinery, caplog):
    caplog.set_level(logging.WARNING, logger="tito_audit.gateway")
    with served(machinery, on_rewrite="refuse") as url:
        first = post(url, "/v1/messages", claude_body(CLAUDE_OPENING, "strict-one"))
        answer = {"role": "assistant", "content": first.json()["content"]}
        edited = [{"role": "user", "content": "Read b.txt"}, CLAUDE_OPENING[1], answer,
                  {"role": "user", "content": "Go on."}]  # fmt: skip
        refused = post(url, "/v1/messages", claude_body(edited, "strict-one"))
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "history_edited"
    assert refused.json()["error"]["message"].startswith("messages[0] differs")  # the client's messages[0]
    lines = [r.getMessage() for r in caplog.records if "history_edited" in r.getMessage()]
    assert len(lines) == 1 and "400" in lines[0] and "strict-one" in lines[0] and "\n" not in lines[0]


def test_the_context_is_the_configs_as_vllm_serves_it_and_max_model_len_overrides(machinery):
    from tito_audit.model.context_window import context_of
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    qwen3 = machinery_for("Qwen/Qwen3-4B", source, None, ()).loaded
    if not (Path(qwen3.resolved.path) / "config.json").is_file():
        pytest.skip("Qwen3-4B's config.json is not in the shared tokenizers")
    assert qwen3.tokenizer.model_max_length == 131072  # what the tokenizer claims
    assert context_of(qwen3).tokens == 40960 and "config.json" in context_of(qwen3).source
    assert context_of(qwen3, 8192).tokens == 8192
    with served(machinery, max_model_len=4096) as url:
        too_long = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                      "max_tokens": 5000})  # fmt: skip
    assert too_long.status_code == 400 and "--max-model-len" in too_long.json()["error"]["message"]
