"""The gateway under hostile requests (issue 35), with the tiny in-repo tokenizer and the fake engine: JSON nested
past any limit, a message the template's render refuses, a ``max_tokens`` no model holds, sessions past their byte
budget, a flood of new session ids, and the memory a deleted session gives back. Each answer is its own status
with one line naming the limit, the server logs no traceback for a client's bad input, and the sessions are as they
were."""

from __future__ import annotations

import ctypes
import json
import logging
import subprocess
import sys
import textwrap

import pytest

from tests import templates
from tito_audit.errors import BadInputError

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
httpx = pytest.importorskip("httpx")

HOSTILE_ON_CUE = (
    "{%- if messages[0].content == 'stall now' -%}{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}"
    "{% endfor %}{%- endif -%}{%- if messages[0].content == 'raise now' -%}{{ raise_exception('no raising here') }}"
    "{%- endif -%}" + templates.GOOD
)


@pytest.fixture(scope="module")
def template_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("limits") / "hostile_on_cue.jinja"
    path.write_text(HOSTILE_ON_CUE, encoding="utf-8")
    return path


def config(tiny_model_dir, template_path, **settings):
    from tito_audit.gateway.gateway import GatewayConfig

    settings.setdefault("parser", "template")
    return GatewayConfig(str(tiny_model_dir), template=str(template_path), allow_hub=False, **settings)


@pytest.fixture(scope="module")
def served(tiny_model_dir, template_path):
    from tito_audit.gateway.gateway import Gateway
    from tito_audit.gateway.server import running

    gateway = Gateway(config(tiny_model_dir, template_path, on_break="warn", max_sessions=3))
    with running(gateway) as url:
        yield gateway, url


def post(url: str, body: dict | bytes, session: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}/v1/chat/completions", content=content, headers={"X-Session-Id": session}, timeout=60)


def error_of(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and "\n" not in error["message"], error
    return error["message"]


def nested_schema(levels: int) -> dict:
    node: dict = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"a": node}}
    return node


HI = [{"role": "user", "content": "hi"}]


def test_json_nested_too_deeply_is_a_400_with_one_line_and_no_traceback_in_the_log(served, caplog):
    _, url = served
    caplog.set_level(logging.DEBUG)
    deep_body = b'{"messages": [{"role": "user", "content": "x"}], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    message = error_of(post(url, deep_body, "deep"), 400, "nested_too_deeply")
    assert "nested deeper than 64 levels" in message
    tools = [{"type": "function", "function": {"name": "f", "parameters": nested_schema(300)}}]
    error_of(post(url, {"messages": HI, "tools": tools}, "deep"), 400, "nested_too_deeply")
    arguments = "[" * 5000 + "]" * 5000
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    history = [*HI, {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "user", "content": "?"}]
    message = error_of(post(url, {"messages": history}, "deep"), 400, "nested_too_deeply")
    assert "messages[1].tool_calls[0].function.arguments" in message
    shallow = [{"type": "function", "function": {"name": "f", "parameters": nested_schema(20)}}]
    assert post(url, {"messages": HI, "tools": shallow}, "shallow").status_code == 200
    server = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]  # not the client's
    assert not [r for r in server if r.exc_info], "a traceback reached the server's log"
    assert sum(len(r.getMessage()) for r in server) < 1000


def test_the_library_refuses_data_nested_too_deeply_as_bad_input(tiny_model_dir, template_path):
    from tests.helpers import load
    from tito_audit import TitoSession
    from tito_audit.session.machinery import build_machinery

    machinery = build_machinery(load(tiny_model_dir, template_path))
    deep_tools = [{"type": "function", "function": {"name": "f", "parameters": nested_schema(300)}}]
    with pytest.raises(BadInputError, match="tools is nested deeper than 64 levels"):
        TitoSession(machinery, tools=deep_tools)
    session = TitoSession(machinery)
    session.start(HI)
    answer = {"role": "assistant", "content": "ok"}
    deep_tool_message = {"role": "tool", "content": "x", "extra": nested_schema(300)}
    with pytest.raises(BadInputError, match=r"tool_messages\[0\] is nested deeper than 64 levels"):
        session.extend(machinery.codec.encode("ok<|im_end|>"), answer, [deep_tool_message])


@pytest.mark.parametrize("on_break", ["warn", "raise"])
def test_a_refused_render_is_its_own_error_naming_an_option_serve_has(tiny_model_dir, template_path, on_break):
    from tito_audit.cli.serve import serve_command
    from tito_audit.gateway.gateway import Gateway
    from tito_audit.gateway.server import running

    gateway = Gateway(config(tiny_model_dir, template_path, on_break=on_break, max_render_chars=20_000))
    gateway_slow = Gateway(config(tiny_model_dir, template_path, on_break=on_break, max_render_seconds=0.5))
    with running(gateway) as url, running(gateway_slow) as slow_url:
        long = post(url, {"messages": [{"role": "user", "content": "ab c" * 10_000}]}, "long")
        message = error_of(long, 413, "render_too_long")
        assert "output longer than 20000 characters" in message and "--max-render-chars" in message
        assert "on_break" not in message
        stall = {"messages": [{"role": "user", "content": "stall now"}]}
        timed = error_of(post(slow_url, stall, "slow"), 422, "render_timeout")
        assert "longer than 0.5s" in timed and "--max-render-seconds" in timed
        raising = {"messages": [{"role": "user", "content": "raise now"}]}
        assert "no raising here" in error_of(post(url, raising, "r"), 422, "template_refused")
        for session in ("long", "slow", "r"):  # a refused first turn opens no session
            assert httpx.get(f"{url}/sessions/{session}").status_code == 404
    options = {parameter for parameter in serve_command.__signature__.parameters}
    assert {"max_render_chars", "max_render_seconds"} <= options


def test_max_tokens_is_bounded_by_the_models_context(served, tiny_model_dir, template_path):
    from tito_audit.gateway.gateway import Gateway
    from tito_audit.model.context_window import FALLBACK_CONTEXT

    gateway, url = served
    message = error_of(post(url, {"messages": HI, "max_tokens": 10**12}, "mt"), 400, "invalid_request")
    assert message.startswith("max_tokens 1000000000000 is past the model's context of 1048576 tokens")
    assert httpx.get(f"{url}/sessions/mt").status_code == 404
    assert gateway.context.tokens == FALLBACK_CONTEXT  # the tiny tokenizer names no context
    with pytest.raises(BadInputError, match=r"--max-tokens 2000000 is past the model's context"):
        Gateway(config(tiny_model_dir, template_path, max_tokens=2_000_000))


def test_a_session_past_its_byte_budget_is_413_and_all_sessions_past_theirs_507(tiny_model_dir, template_path):
    from tito_audit.gateway.gateway import Gateway
    from tito_audit.gateway.server import running

    mib = 1 << 20
    gateway = Gateway(config(tiny_model_dir, template_path, max_session_bytes=mib, max_total_bytes=2 * mib))
    with running(gateway) as url:
        assert post(url, {"messages": HI, "max_tokens": 64}, "small").status_code == 200
        before = httpx.get(f"{url}/sessions/small").json()
        huge = [{"role": "user", "content": "more words " * 3000}]  # about 1.5 MiB with the tiny vocabulary
        message = error_of(post(url, {"messages": huge, "max_tokens": 64}, "huge"), 413, "session_too_large")
        assert "session 'huge' would hold about 1.5 MiB" in message and "past --max-session-bytes (1.0 MiB)" in message
        follow = [*HI, httpx.get(f"{url}/sessions/small").json()["messages"][-1], {"role": "user", "content": "go"}]
        asked = error_of(post(url, {"messages": follow, "max_tokens": 20_000}, "small"), 413, "session_too_large")
        assert "'small'" in asked  # 20,000 tokens of completion reserved would pass it
        filler = [{"role": "user", "content": "more words " * 1700}]  # about 0.86 MiB each: the third passes 2 MiB
        assert post(url, {"messages": filler, "max_tokens": 64}, "a").status_code == 200
        assert post(url, {"messages": filler, "max_tokens": 64}, "b").status_code == 200
        full = post(url, {"messages": filler, "max_tokens": 64}, "c")
        assert "past --max-total-bytes (2.0 MiB)" in error_of(full, 507, "insufficient_storage")
        assert full.json()["error"]["type"] == "server_error"  # the gateway's own limit, not the engine's
        assert httpx.get(f"{url}/sessions/small").json() == before
        assert httpx.get(f"{url}/sessions/c").status_code == 404
        assert httpx.delete(f"{url}/sessions/a").status_code == 200  # room again
        assert post(url, {"messages": filler, "max_tokens": 64}, "c").status_code == 200
        health = httpx.get(f"{url}/healthz").json()
        assert 1.5 * mib < health["session_bytes"] <= health["max_total_bytes"] == 2 * mib


def test_a_404_says_why_a_session_is_gone(served):
    _, url = served  # at most 3 sessions
    for name in ("e1", "e2", "e3", "e4"):  # e1, the least recently used, is evicted by e4
        assert post(url, {"messages": HI}, name).status_code == 200
    evicted = error_of(httpx.get(f"{url}/sessions/e1"), 404, "unknown_session")
    assert "evicted" in evicted and "at most 3 sessions (--max-sessions)" in evicted
    resumed = [*HI, {"role": "assistant", "content": "x"}, {"role": "user", "content": "?"}]
    assert "evicted" in error_of(post(url, {"messages": resumed}, "e1"), 404, "unknown_session")
    assert "evicted" in error_of(httpx.get(f"{url}/sessions/e1"), 404, "unknown_session")  # still remembered
    assert httpx.delete(f"{url}/sessions/e4").status_code == 200
    assert "was deleted" in error_of(httpx.get(f"{url}/sessions/e4"), 404, "unknown_session")
    assert "never opened" in error_of(httpx.get(f"{url}/sessions/nobody"), 404, "unknown_session")


def test_an_expired_session_says_so(tiny_model_dir, template_path):
    import time

    from tito_audit.gateway.gateway import Gateway
    from tito_audit.gateway.server import running

    with running(Gateway(config(tiny_model_dir, template_path, session_idle=0.3))) as url:
        assert post(url, {"messages": HI}, "idle").status_code == 200
        time.sleep(0.5)
        message = error_of(httpx.get(f"{url}/sessions/idle"), 404, "unknown_session")
        assert "expired, idle for longer than 0.3 s (--session-idle)" in message


GIVE_BACK = textwrap.dedent(
    """
    import gc, json, sys
    import httpx
    from tito_audit.gateway.server import running
    from tito_audit.gateway.gateway import Gateway, GatewayConfig

    def rss():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmRSS"))

    config = GatewayConfig(sys.argv[1], template=sys.argv[2], allow_hub=False, parser="template")
    with running(Gateway(config)) as url:
        def chat(session, text):
            body = {"messages": [{"role": "user", "content": text}]}
            return httpx.post(url + "/v1/chat/completions", json=body, headers={"X-Session-Id": session}, timeout=120)

        assert chat("warm", "hi").status_code == 200
        httpx.delete(url + "/sessions/warm")
        gc.collect()
        before = rss()
        assert chat("big", "ab c" * 330_000).status_code == 200  # 990,000 tokens: within the context (2^20)
        held = rss()
        assert httpx.delete(url + "/sessions/big").status_code == 200
        gc.collect()
        print(json.dumps({"before": before, "held": held, "after": rss()}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident memory is read from /proc (Linux)")
def test_a_deleted_session_gives_its_memory_back(tiny_model_dir):
    """One message of 1.3 M characters, then DELETE: resident memory comes back (on main it stayed where it was)."""
    if not hasattr(ctypes.CDLL(None), "malloc_trim"):
        pytest.skip("no malloc_trim here (not glibc): the allocator keeps freed memory in its heaps")
    template = tiny_model_dir.parent / "good_for_memory.jinja"
    template.write_text(templates.GOOD, encoding="utf-8")
    command = [sys.executable, "-c", GIVE_BACK, str(tiny_model_dir), str(template)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    numbers = json.loads(done.stdout.strip().splitlines()[-1])
    grown = numbers["held"] - numbers["before"]
    assert grown > 64 << 20, numbers  # the session and its render took memory
    assert numbers["after"] - numbers["before"] < 0.3 * grown, numbers
