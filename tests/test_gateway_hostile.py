"""The gateway against the second hostile battery (issue 42), with the tiny in-repo tokenizer, the fake engine or an
engine of the test's own that misbehaves on demand (:mod:`tests.hostile_engine`): session ids no HTTP header can
carry as they are, a DELETE while a turn waits on the engine, a store that cannot keep a streamed turn, more streams
than httpx's default pool, engines that answer past ``max_tokens`` or never end, a large record read while other
requests come, corrupt store files, a prompt past the model's context, a ``previous_response_id`` of a deleted
session. Every wait is bounded: a server that hangs fails the test, it does not hang it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.hostile_engine import HostileEngine, Plan, prompt_text
from tests.test_gateway_branches import TOOLS  # read_file

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai", reason="the openai client is not installed (pip install -e '.[dev]')")
anthropic = pytest.importorskip("anthropic", reason="the anthropic client is not installed (pip install -e '.[dev]')")

HI = [{"role": "user", "content": "hi"}]
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def template_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "good.jinja"
    path.write_text(templates.GOOD, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def machinery(tiny_model_dir, template_path):
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([], None, None, False, False, str(template_path), None)
    return machinery_for(str(tiny_model_dir), source, None, ())


def gateway(machinery, tiny_model_dir, **settings):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig

    settings.setdefault("parser", "template" if settings.get("engine", "fake") == "fake" else "text")
    return Gateway(GatewayConfig(str(tiny_model_dir), allow_hub=False, **settings), machinery=machinery)


def chat(url: str, session: str | bytes, messages: list[dict], **more) -> httpx.Response:
    body = {"messages": messages, **more}
    header = session.encode() if isinstance(session, str) else session  # raw UTF-8, as clients send text
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": header}, timeout=TIMEOUT)


def record(url: str, session: str) -> httpx.Response:
    return httpx.get(f"{url}/sessions/{urllib.parse.quote(session, safe='')}", timeout=TIMEOUT)


def events_of(response: httpx.Response) -> list:
    """The data of each server-sent event (``[DONE]`` as the string)."""
    out = []
    for line in response.text.splitlines():
        if line.startswith("data:"):
            data = line[5:].strip()
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def answer_ids(machinery, text: str) -> list[int]:
    return [*machinery.codec.encode(text), machinery.codec.id_of("<|im_end|>")]


# -- 1. session ids no header carries as they are ---------------------------------------------------------------------
def test_every_session_id_the_server_accepts_is_answered_and_no_lock_stays_held(machinery, tiny_model_dir):
    """Ids from the body (chat's and Responses' ``user``, Messages' ``metadata.user_id``) and raw UTF-8 in the
    ``X-Session-Id`` request header: each answered (the header percent-encoded, RFC 8187's ``X-Session-Id*`` beside
    it), streamed or not, and no session is left locked: the next request on each id answers, and with
    ``--max-sessions 4`` a new session still opens afterwards (on main: a 500 after the turn was committed, and a
    streamed one left its session locked for ever)."""
    from tito_audit.gateway.server import running

    with running(gateway(machinery, tiny_model_dir, max_sessions=4)) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        for session in ("ключ", "日本-1", "café ☕"):
            raw = client.chat.completions.with_raw_response.create(model="m", messages=HI, user=session)
            encoded = urllib.parse.quote(session, safe="")
            assert raw.headers["x-session-id"] == encoded and raw.headers["x-session-id*"] == f"UTF-8''{encoded}"
            answer = raw.parse()
            assert answer.model_extra["tito"]["session"] == session
            follow = [*HI, answer.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "?"}]
            chunks = list(client.chat.completions.create(model="m", messages=follow, user=session, stream=True))
            assert chunks[-1].choices[0].finish_reason in ("stop", "length", "tool_calls")
            kept = httpx.get(f"{url}/sessions/{encoded}", timeout=TIMEOUT).json()  # the header's value is the path
            assert kept["session"] == session and len(kept["turns"]) == 2
        # raw UTF-8 in the request header names the same session as the body's user; so does RFC 8187's form
        opened = chat(url, "ключ-2".encode(), HI)
        assert opened.status_code == 200 and opened.headers["x-session-id"] == urllib.parse.quote("ключ-2", safe="")
        follow = [*HI, opened.json()["choices"][0]["message"], {"role": "user", "content": "?"}]
        extended = httpx.post(
            f"{url}/v1/chat/completions",
            json={"messages": follow},
            headers={"X-Session-Id*": "UTF-8''" + urllib.parse.quote("ключ-2", safe="")},
            timeout=TIMEOUT,
        )
        assert extended.status_code == 200 and extended.json()["tito"]["turn"] == 2
        third = [*follow, extended.json()["choices"][0]["message"], {"role": "user", "content": "!"}]
        by_user = httpx.post(f"{url}/v1/chat/completions", json={"messages": third, "user": "ключ-2"}, timeout=TIMEOUT)
        assert by_user.status_code == 200 and by_user.json()["tito"]["turn"] == 3
        bad = chat(url, b"\xff\xfe", HI)
        assert bad.status_code == 400 and "X-Session-Id" in bad.json()["error"]["message"]
        # the other dialects, streamed
        api = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=TIMEOUT)
        with api.messages.stream(model="m", max_tokens=64, messages=HI, metadata={"user_id": "ユーザー"}) as streamed:
            final = streamed.get_final_message()
        assert final.model_extra["tito"]["session"] == "ユーザー"
        events = list(client.responses.create(model="m", input="hi", user="ответ", stream=True))
        assert events[-1].type in ("response.completed", "response.incomplete")
        assert record(url, "ответ").json()["session"] == "ответ"
        for session in ("ключ", "ユーザー", "ответ"):  # none is locked: each answers (a new branch, or a new session)
            assert chat(url, session, [{"role": "user", "content": "other"}]).status_code == 200
        assert chat(url, "a-new-one", HI).status_code == 200  # the table is not full of locked sessions


def test_a_streamed_turn_of_any_id_leaves_no_session_locked(machinery, tiny_model_dir):
    """Streamed first turns under ids no header carries as they are, on ``--max-sessions 2``: a later request on the
    id answers and a new session opens (on main the answer failed after the lock was taken and kept it for ever:
    the next request on the id hung, the table filled with busy sessions and a new one was 503)."""
    from tito_audit.gateway.server import running

    with running(gateway(machinery, tiny_model_dir, max_sessions=2)) as url:
        for session in ("ключ", "日本-1"):
            body = {"messages": HI, "user": session, "stream": True}
            streamed = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT)
            assert streamed.status_code == 200 and events_of(streamed)[-1] == "[DONE]"
            assert streamed.headers["x-session-id*"] == "UTF-8''" + urllib.parse.quote(session, safe="")
            assert chat(url, session, [{"role": "user", "content": "other"}]).status_code == 200  # a new branch
        assert chat(url, "new", HI).status_code == 200


# -- 3. a streamed turn the store cannot keep -------------------------------------------------------------------------
@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
def test_a_streamed_turn_the_store_cannot_keep_ends_with_the_reason(machinery, tiny_model_dir, tmp_path, dialect):
    """The turn's write fails (the file closed under it, as a full disk fails it): the stream ends with the dialect's
    error event naming ``store_failed`` instead of its normal end, and the session is as it was (on main: the whole
    answer and its normal end, then a session without the turn)."""
    from tito_audit.gateway.server import running

    served = gateway(machinery, tiny_model_dir, store=tmp_path / "s.db")
    with running(served) as url:
        first = chat(url, "w", HI)
        assert first.status_code == 200
        before = record(url, "w").json()
        sent_before = served.store.get("w").sent  # what the next request's history is compared with
        served.durable._connection.close()  # nothing can be written any more
        follow = [*HI, first.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
        if dialect == "chat":
            client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
            with pytest.raises(openai.APIError) as raised:
                list(client.chat.completions.create(model="m", messages=follow, user="w", stream=True))
            assert raised.value.code == "store_failed" and "--store" in raised.value.message
        elif dialect == "responses":
            items = [{"role": m["role"], "content": m["content"] or ""} for m in follow]
            response = httpx.post(
                f"{url}/v1/responses",
                json={"input": items, "stream": True},
                headers={"X-Session-Id": "w"},
                timeout=TIMEOUT,
            )
            kinds = [e["type"] for e in events_of(response)]
            assert kinds[-2:] == ["error", "response.failed"] and "response.completed" not in kinds
            assert events_of(response)[-2]["code"] == "store_failed"
        else:
            api = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=TIMEOUT)
            messages = [{"role": m["role"], "content": m["content"] or "-"} for m in follow]
            streamed = api.messages.stream(model="m", max_tokens=64, messages=messages, metadata={"user_id": "w"})
            with pytest.raises(anthropic.APIStatusError, match="--store"), streamed as events:
                events.get_final_message()
            response = httpx.post(
                f"{url}/v1/messages",
                json={"messages": messages, "max_tokens": 64, "stream": True},
                headers={"X-Session-Id": "w"},
                timeout=TIMEOUT,
            )
            kinds = [e["type"] for e in events_of(response)]
            assert kinds[-1] == "error" and "message_stop" not in kinds
        assert record(url, "w").json() == before
        assert served.store.get("w").sent is sent_before  # all of the turn's commit put back


# -- 11. previous_response_id of a session that ended ------------------------------------------------------------------
def test_a_previous_response_of_a_deleted_session_is_400_previous_response_not_found(machinery, tiny_model_dir):
    """As OpenAI's API answers a response id it does not have (and as the docs said; on main: 404)."""
    from tito_audit.gateway.server import running

    with running(gateway(machinery, tiny_model_dir)) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        first = client.responses.create(model="m", input="hi", user="gone")
        assert httpx.delete(f"{url}/sessions/gone").status_code == 200
        with pytest.raises(openai.BadRequestError) as raised:
            client.responses.create(model="m", input="again", previous_response_id=first.id)
        assert raised.value.code == "previous_response_not_found" and "deleted" in raised.value.message


# -- 2. a DELETE while a first turn waits on the engine ----------------------------------------------------------------
def wait_for(condition, seconds: float = TIMEOUT) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("the condition did not come within the bound")
        time.sleep(0.01)


@pytest.mark.parametrize(("stored", "stream"), [(True, False), (True, True), (False, False)])
def test_a_turn_begun_before_a_delete_never_comes_back(machinery, tiny_model_dir, tmp_path, stored, stream):
    """DELETE a session while its first turn waits on the engine; another client reuses the id for two turns; the
    slow turn then ends: it is answered 404 (not kept), the newer session is untouched, in memory and, with
    ``--store``, after a restart (on main the slow turn's first write deleted the newer session's rows: after a
    restart the id held the deleted conversation)."""
    from tito_audit.gateway.server import running

    hold = threading.Event()
    answer = answer_ids(machinery, "ok")
    engine = HostileEngine(lambda body: Plan(answer, hold=hold if "slow" in prompt_text(machinery, body) else None))
    settings = {"engine": engine.url, "store": tmp_path / "s.db" if stored else None}
    try:
        with (
            running(gateway(machinery, tiny_model_dir, **settings)) as url,
            concurrent.futures.ThreadPoolExecutor(1) as pool,
        ):
            slow = pool.submit(chat, url, "x", [{"role": "user", "content": "slow"}], stream=stream)
            wait_for(lambda: len(engine.bodies) == 1)  # the slow turn waits on the engine
            assert httpx.delete(f"{url}/sessions/x", timeout=TIMEOUT).status_code == 200
            first = chat(url, "x", [{"role": "user", "content": "fast"}])
            assert first.status_code == 200, first.text
            follow = [{"role": "user", "content": "fast"}, first.json()["choices"][0]["message"]]
            assert chat(url, "x", [*follow, {"role": "user", "content": "again"}]).status_code == 200
            newer = record(url, "x").json()
            hold.set()
            late = slow.result(timeout=TIMEOUT)
            assert record(url, "x").json() == newer
            assert [m["content"] for m in newer["messages"] if m["role"] == "user"] == ["fast", "again"]
        if stored:
            with running(gateway(machinery, tiny_model_dir, **settings)) as url:
                assert record(url, "x").json() == newer
    finally:
        hold.set()
        engine.close()
    if stream:  # the stream had begun: it ends with the error event instead of its normal end
        assert late.status_code == 200 and events_of(late)[-1] != "[DONE]"
        error = events_of(late)[-1]["error"]
    else:
        assert late.status_code == 404, late.text
        error = late.json()["error"]
    assert error["code"] == "unknown_session" and "ended while this turn ran" in error["message"]


# -- 4. more streams than httpx's default pool -------------------------------------------------------------------------
def test_the_engine_gets_as_many_requests_at_once_as_the_server_has_sessions(machinery, tiny_model_dir):
    """110 streams at once, each 1.6 s long with an event every 0.2 s: all 110 reach the engine at once and are
    answered (on main httpx's pool of 100 held 10 back: the engine saw at most 100 at once, and past a time-out of 1 s
    they were 504 "the engine sent nothing", the engine never asked). ``--engine-timeout 3``: a busy machine (the
    suite runs two workers) may delay an event past 1 s; the engine's count is what shows the pool."""
    from tito_audit.gateway.server import running

    ids = answer_ids(machinery, "a b c d e f g")
    engine = HostileEngine(lambda body: Plan(ids, per_event=max(1, len(ids) // 8), gap=0.2))

    async def streams(url: str, count: int) -> list[str]:
        limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
        async with httpx.AsyncClient(limits=limits, timeout=TIMEOUT) as client:

            async def one(number: int) -> str:
                body = {"messages": HI, "stream": True}
                response = await client.post(
                    f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": f"s{number}"}
                )
                if response.status_code != 200:
                    return f"{response.status_code} {response.json()['error']['code']}"
                return "ok" if events_of(response)[-1] == "[DONE]" else "stream error"

            return await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(count))), TIMEOUT * 2)

    try:
        with running(gateway(machinery, tiny_model_dir, engine=engine.url, engine_timeout=3.0)) as url:
            outcomes = asyncio.run(streams(url, 110))
        assert outcomes == ["ok"] * 110, sorted(set(outcomes))
        assert engine.most == 110
    finally:
        engine.close()


def test_a_request_that_finds_no_free_connection_is_not_blamed_on_the_engine(machinery):
    """A pool of one connection held by a slow answer (each byte within the time-out): the second request was never
    sent, so it is 503 ``engine_busy``, not the engine's 504."""
    from tito_audit.gateway.errors import EngineError
    from tito_audit.gateway.sampling_engines import EngineRequest, HttpEngine

    engine = HostileEngine(lambda body: Plan(answer_ids(machinery, "ok"), trickle=True, gap=0.01))

    async def both() -> list:
        http = HttpEngine(engine.url, "vllm", 0.5, connections=1)
        request = EngineRequest([1, 2], {"max_tokens": 8}, [0], "m")
        try:
            return await asyncio.wait_for(
                asyncio.gather(http.generate(request), http.generate(request), return_exceptions=True), TIMEOUT
            )
        finally:
            await http.close()

    try:
        outcomes = asyncio.run(both())
    finally:
        engine.close()
    failed = [o for o in outcomes if isinstance(o, EngineError)]
    assert len(failed) == 1 and (failed[0].status, failed[0].code) == (503, "engine_busy"), outcomes
    assert "was not sent" in str(failed[0])


# -- 6. an engine past max_tokens, or one that never ends --------------------------------------------------------------
def test_ids_past_max_tokens_are_cut_and_an_endless_stream_is_closed(machinery, tiny_model_dir):
    """An engine answering 5,000 ids to ``max_tokens: 10`` (whole or streamed), or streaming for ever: the turn keeps
    10 ids, ``finish_reason: length``, and the engine's stream is closed; an answer larger in bytes than 10 ids can
    take is refused (on main all 5,000 were kept, past the session's reservation)."""
    from tito_audit.gateway.server import running

    word = machinery.codec.encode(" word")
    plans = {
        "many": Plan(word * 5000, per_event=50),
        "endless": Plan(word * 3, endless=True, gap=0.001),
        "huge": Plan(word * 400_000),
    }
    engine = HostileEngine(lambda body: next(p for name, p in plans.items() if name in prompt_text(machinery, body)))
    try:
        with running(gateway(machinery, tiny_model_dir, engine=engine.url)) as url:
            for session, stream in (("many", False), ("many", True), ("endless", True)):
                name = f"{session}-{stream}"
                sent = [{"role": "user", "content": session}]
                answered = chat(url, name, sent, max_tokens=10, stream=stream)
                assert answered.status_code == 200, answered.text
                if stream:
                    last = [e for e in events_of(answered) if e != "[DONE]"][-1]
                    assert last["choices"][0]["finish_reason"] == "length" and last["tito"]["completion_ids"] == 10
                else:
                    assert answered.json()["choices"][0]["finish_reason"] == "length"
                    assert answered.json()["usage"]["completion_tokens"] == 10
                kept = record(url, name).json()
                assert sum(kept["loss_mask"]) == 10 and kept["turns"][0]["stopped"] is False
            wait_for(lambda: engine.closed >= 1 and engine.active == 0)  # the endless stream was closed, it ended
            huge = chat(url, "huge", [{"role": "user", "content": "huge"}], max_tokens=10)
            assert huge.status_code == 502 and "larger than" in huge.json()["error"]["message"]
            assert record(url, "huge").status_code == 404
    finally:
        engine.close()


@pytest.mark.parametrize("stream", [False, True])
def test_an_engine_that_never_finishes_ends_at_the_deadline(machinery, tiny_model_dir, stream):
    """Events without ids for ever (streamed), or an answer a byte at a time (whole), each within
    ``--engine-timeout``: 504 once ``--engine-deadline`` passed (on main both went on as long as the engine did)."""
    from tito_audit.gateway.server import running

    plan = Plan([1], idle=True, gap=0.05) if stream else Plan(answer_ids(machinery, "ok") * 50, trickle=True, gap=0.05)
    engine = HostileEngine(lambda body: plan)
    settings = {"engine": engine.url, "engine_timeout": 1.0, "engine_deadline": 2.0}
    try:
        with running(gateway(machinery, tiny_model_dir, **settings)) as url:
            started = time.monotonic()
            answered = chat(url, "d", HI, stream=stream)
            assert time.monotonic() - started < 10
        assert answered.status_code == 504 and "--engine-deadline" in answered.json()["error"]["message"]
    finally:
        engine.close()


# -- 8. a large record read while other requests come ------------------------------------------------------------------
def test_a_record_is_built_off_the_event_loop(machinery, tiny_model_dir):
    """While a session's record is being built (held there by the test: a copy of the session that takes its time),
    ``/healthz`` and other sessions answer, each within a second; the record then comes whole (on main the record was
    built on the event loop: nothing else was answered until it was done). The figures for a record of 990,000
    tokens read three times at once are ``make bench-gateway-hostile``'s."""
    from tito_audit.gateway.server import running

    served = gateway(machinery, tiny_model_dir)
    entered, release = threading.Event(), threading.Event()
    with running(served) as url, concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert chat(url, "slow-record", HI).status_code == 200
        session = served.store.get("slow-record").session
        fork = session.fork

        def slow_fork():
            entered.set()
            release.wait(TIMEOUT)
            return fork()

        session.fork = slow_fork
        try:
            reading = pool.submit(record, url, "slow-record")
            assert entered.wait(TIMEOUT)
            for _ in range(5):
                started = time.perf_counter()
                assert httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200
                assert chat(url, "other", HI).status_code == 200
                assert time.perf_counter() - started < 1.0
        finally:
            release.set()
        answered = reading.result(timeout=TIMEOUT)
    assert answered.status_code == 200 and answered.json()["session"] == "slow-record"


def test_a_record_sent_in_pieces_is_the_json_of_the_whole():
    """The pieces :func:`~tito_audit.gateway.encoding.json_stream` sends add up to ``json.dumps`` of the value."""
    from tito_audit.gateway import encoding

    async def sent(value) -> bytes:
        return b"".join([chunk async for chunk in encoding.json_stream(value)])

    value = {
        "buffer": list(range(3 * encoding.SLICE + 5)),
        "logprobs": [None, -0.5, 0.0] * 5000,
        "messages": [{"role": "user", "content": 'ключ "quoted" 🚀\n' * 500}, {"role": "assistant", "content": ""}],
        "turns": [{"completion": [1, 2], "bridge": [], "message": {"tool_calls": [{"id": "c", "arguments": {}}]}}],
        "empty": [],
        "nested": [[1, [2, [3]]], []],
        3: True,
    }
    whole = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    assert asyncio.run(sent(value)) == whole


# -- 5. a streamed completion decoded once, not once per piece ---------------------------------------------------------
def byte_split(codec, text: str) -> list[int]:
    """``text``'s ids with every character of more than one byte written as one token per byte (a model may sample
    those), where the vocabulary has byte tokens (byte-level BPE or SentencePiece's byte fallback)."""
    kept = [*range(33, 127), *range(161, 173), *range(174, 256)]  # byte-level BPE writes these bytes as themselves
    moved = [b for b in range(256) if b not in kept]  # and the others as the characters from U+0100 on, in order
    byte_tokens = {b: chr(b) if b in kept else chr(256 + moved.index(b)) for b in range(256)}
    ids: list[int] = []
    for char in text:
        data = char.encode("utf-8")
        single = [codec.tokenizer.convert_tokens_to_ids(byte_tokens[b]) for b in data]
        fallback = [codec.tokenizer.convert_tokens_to_ids(f"<0x{b:02X}>") for b in data]
        unknown = codec.tokenizer.unk_token_id
        for candidate in (single, fallback):
            usable = len(data) > 1 and all(isinstance(i, int) and i != unknown for i in candidate)
            if usable and codec.decode(candidate) == char:
                ids += candidate
                break
        else:
            ids += codec.encode(char)
    return ids


@requires_shared
@pytest.mark.shared
@pytest.mark.parametrize(
    "model", ["Qwen/Qwen2.5-7B-Instruct", "google/gemma-3-4b-it", "mistralai/Mistral-Nemo-Instruct-2407"]
)
def test_a_streamed_completion_is_decoded_once_and_byte_exact(model):
    """Ids fed one at a time (characters split across byte tokens, control tokens in the text, the stop token last):
    the text handed to the parser is the whole completion's text byte for byte, and decoding it cost a bounded number
    of ids per id fed (on main every piece decoded the whole completion again: about n^2/2 ids)."""
    from tito_audit.gateway.completion_stream import CompletionStream
    from tito_audit.parse.incremental import Increment
    from tito_audit.session import TitoSession
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    loaded = machinery_for(model, source, None, ())
    codec = loaded.codec
    session = TitoSession(loaded)
    session.start([{"role": "user", "content": "Write."}])
    text = "Crème brûlée, 東京の天気 🚀🎉 ключ — done.\n" * 40
    controls = sorted(codec.control_ids - loaded.stop_ids)[:2]
    ids = byte_split(codec, text) + controls + codec.encode(" and more text after the controls") * 10
    ids += sorted(loaded.stop_ids)[:1]

    class Collect:
        def __init__(self) -> None:
            self.text = ""

        def feed(self, piece: str) -> Increment:
            self.text += piece
            return Increment()

        def end(self) -> Increment:
            return Increment()

    stream = CompletionStream(session, None, None)
    stream._parser, stream.mode = Collect(), "incremental"
    decoded = [0]
    decode = codec.decode

    def counting(some):
        decoded[0] += len(some)
        return decode(some)

    codec.decode = counting
    try:
        for token in ids:
            stream.feed([token])
        fed_while_streaming = stream._parser.text
    finally:
        del codec.decode
    whole = session.decode_completion(ids[:-1])
    assert whole == fed_while_streaming  # byte for byte, nothing held back at the end (no partial character)
    assert decoded[0] < 64 * len(ids), f"{decoded[0]} ids decoded for {len(ids)} fed"


# -- 7. tool results that answer no call -------------------------------------------------------------------------------


def test_a_tool_result_that_answers_no_call_is_refused_naming_it(machinery, tiny_model_dir):
    """A tool result whose id names no call the session issued (chat ``tool_call_id``, Responses
    ``function_call_output.call_id``, Messages ``tool_result.tool_use_id``): 400 naming the message and the id, and
    the option for harnesses that rename ids; the session as it was (on main: answered and kept in the record)."""
    from tito_audit.gateway.server import running

    def refused(error: dict, where: str, call_id: str) -> None:
        assert error["code"] == "tool_call_not_found", error
        assert error["message"].startswith(where) and repr(call_id) in error["message"]
        assert "--match tool-call-format" in error["message"]

    with running(gateway(machinery, tiny_model_dir)) as url:
        sent = [{"role": "user", "content": "Read a.txt"}]
        answer = chat(url, "t", sent, tools=TOOLS, tool_choice="required").json()["choices"][0]["message"]
        assert answer["tool_calls"]
        before = record(url, "t").json()
        bogus = [*sent, answer, {"role": "tool", "tool_call_id": "call_bogus", "content": "x"}]
        answered = chat(url, "t", bogus, tools=TOOLS)
        assert answered.status_code == 400
        refused(answered.json()["error"], "messages[2]", "call_bogus")
        assert record(url, "t").json() == before
        opening = chat(url, "t2", [*sent, {"role": "tool", "tool_call_id": "call_1", "content": "x"}], tools=TOOLS)
        assert opening.status_code == 400 and "no assistant turn comes before it" in opening.json()["error"]["message"]
        assert record(url, "t2").status_code == 404

        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        tools = [{"type": "function", **TOOLS[0]["function"]}]
        first = client.responses.create(model="m", input="Read a.txt", tools=tools, tool_choice="required", user="r")
        assert any(item.type == "function_call" for item in first.output)
        before = record(url, "r").json()
        output = [{"type": "function_call_output", "call_id": "fc_bogus", "output": "x"}]
        with pytest.raises(openai.BadRequestError) as raised:
            client.responses.create(model="m", input=output, tools=tools, previous_response_id=first.id)
        refused(raised.value.body, "input[0]", "fc_bogus")
        assert record(url, "r").json() == before

        api = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=TIMEOUT)
        tool = {"name": "read_file", "description": "Read a file.", "input_schema": TOOLS[0]["function"]["parameters"]}
        asked = [{"role": "user", "content": "Read a.txt"}]
        opened = api.messages.create(
            model="m",
            max_tokens=64,
            messages=asked,
            tools=[tool],
            tool_choice={"type": "any"},
            metadata={"user_id": "a"},
        )
        assert any(block.type == "tool_use" for block in opened.content)
        before = record(url, "a").json()
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_bogus", "content": "x"}]}
        follow = [*asked, {"role": "assistant", "content": [b.model_dump() for b in opened.content]}, result]
        with pytest.raises(anthropic.BadRequestError) as refusal:
            api.messages.create(model="m", max_tokens=64, messages=follow, tools=[tool], metadata={"user_id": "a"})
        refused(refusal.value.body["error"], "messages[2].content[0]", "toolu_bogus")
        assert record(url, "a").json() == before

    with running(gateway(machinery, tiny_model_dir, match="tool-call-format")) as url:
        answer = chat(url, "h", sent, tools=TOOLS, tool_choice="required").json()["choices"][0]["message"]
        renamed = json.loads(json.dumps(answer))  # a harness that writes its own call ids, in history and results
        for number, call in enumerate(renamed["tool_calls"]):
            call["id"] = f"toolu_{number}"
        results = [{"role": "tool", "tool_call_id": c["id"], "content": "x"} for c in renamed["tool_calls"]]
        assert chat(url, "h", [*sent, renamed, *results], tools=TOOLS).status_code == 200


# -- 9. corrupt store files --------------------------------------------------------------------------------------------
SECRET = "the-session-text-no-error-may-quote "


def _garbage_inside(path) -> None:
    data = bytearray(path.read_bytes())
    data[4096:12288] = b"\xde\xad\xbe\xef" * 2048
    path.write_bytes(bytes(data))


def _sql(statement: str, *values):
    def damage(path) -> None:
        with sqlite3.connect(path) as connection:
            connection.execute(statement, values)
        connection.close()

    return damage


CORRUPTIONS = {
    "garbage inside": _garbage_inside,
    "identity not JSON": _sql("UPDATE meta SET value = ?", SECRET + "{"),
    "turn not JSON": _sql("UPDATE turns SET change = ?", SECRET + "{"),
    "turn of another shape": _sql("UPDATE turns SET change = ?", json.dumps({"session": SECRET * 8})),
    "history of another shape": _sql(
        "UPDATE turns SET change = json_set(change, '$.history', json_array(?))", SECRET * 8
    ),
    "tools not JSON": _sql("UPDATE sessions SET tools = ?", SECRET),
    "id not text": _sql("UPDATE sessions SET id = x'00ff' WHERE id = 'a'"),
    "a session without turns": _sql("UPDATE sessions SET id = 'c' WHERE id = 'a'"),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupt_store_is_refused_in_one_line_that_quotes_no_session(machinery, tiny_model_dir, tmp_path, corruption):
    """Garbage inside the file, a value that is not JSON, a row of another shape: the start is refused with one line
    naming the file and what is wrong, never a session's text (on main: "unexpected ...Error", one quoting 200
    characters of a session)."""
    from tito_audit.errors import BadInputError
    from tito_audit.gateway.server import running

    path = tmp_path / "s.db"
    with running(gateway(machinery, tiny_model_dir, store=path)) as url:
        for session in ("a", "b"):
            assert chat(url, session, [{"role": "user", "content": SECRET * 8}]).status_code == 200
    CORRUPTIONS[corruption](path)
    with pytest.raises(BadInputError) as raised:
        gateway(machinery, tiny_model_dir, store=path)
    message = str(raised.value)
    assert message.startswith(f"--store {path}: ") and "\n" not in message, message
    assert "the-session-text" not in message, message


def test_serve_on_a_corrupt_store_exits_2_with_one_error_line(tiny_model_dir, template_path, tmp_path):
    path = tmp_path / "s.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\x10\x00" + b"\xff" * 4000)  # a header, then nothing SQLite wrote
    command = [sys.executable, "-m", "tito_audit", "serve", str(tiny_model_dir), "--template", str(template_path)]
    done = subprocess.run([*command, "--no-hub", "--store", str(path)], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: --store {path}"), done.stderr


# -- 10. a prompt past the model's context -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_context(tiny_model_dir, template_path, tmp_path_factory):
    """The tiny tokenizer as a model whose ``config.json`` says 4,096 tokens of context."""
    import shutil

    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    folder = tmp_path_factory.mktemp("small-context") / "tiny-org--small-context"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}), encoding="utf-8")
    source = ModelSourceSettings.of([], None, None, False, False, str(template_path), None)
    return machinery_for(str(folder), source, None, ()), folder


def test_in_front_of_vllm_max_tokens_past_the_context_is_lowered_not_refused(small_context):
    """vLLM 0.33 serves a request whose prompt fits the context however many tokens it asks for, sampling at most what
    the context leaves; only a prompt that fills the context alone is refused. The SGLang-shaped gateway refuses the
    same request (the test above); on main the vLLM-shaped one did too."""
    from tito_audit.gateway.server import running

    loaded, folder = small_context
    served = gateway(loaded, folder, max_tokens=256, engine_api="vllm")
    with running(served) as url:
        answer = chat(url, "long", [{"role": "user", "content": "ab c " * 1000}], max_tokens=4000)
        assert answer.status_code == 200, answer.text
        usage = answer.json()["usage"]
        assert usage["prompt_tokens"] + 4000 > 4096 and usage["prompt_tokens"] + usage["completion_tokens"] <= 4096
        for content in ("ab c " * 1500, "x" * 1_000_000):  # its prompt alone past the context, counted or bounded
            refused = chat(url, "past", [{"role": "user", "content": content}], max_tokens=1)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
            assert "fills the model's context of 4,096 tokens" in refused.json()["error"]["message"]


def test_the_sampled_max_tokens_is_what_the_engine_leaves():
    """``check_prompt`` as each engine counts: as asked when it fits; past the context, lowered to what is left in
    front of vLLM (refused when nothing is left, or when max_tokens alone passes the context, as vLLM's request
    validation refuses it) and refused in front of SGLang."""
    from tito_audit.gateway.errors import RequestError
    from tito_audit.gateway.prompt_bounds import PromptBounds
    from tito_audit.model.context_window import Context

    class Trial:
        forgotten = False

        def forget(self):
            self.forgotten = True

    context = Context(100, "config.json max_position_embeddings")
    vllm, sglang = PromptBounds(context, None, "vllm"), PromptBounds(context, None, "sglang")
    assert vllm.check_prompt(Trial(), 60, 40) == 40 == sglang.check_prompt(Trial(), 60, 40)
    assert vllm.check_prompt(Trial(), 60, 90) == 40
    for bounds, prompt, max_tokens in ((sglang, 60, 41), (vllm, 100, 1), (vllm, 130, 1), (vllm, 10, 101)):
        trial = Trial()
        with pytest.raises(RequestError, match="context of 100 tokens"):
            bounds.check_prompt(trial, prompt, max_tokens)
        assert trial.forgotten


def test_a_prompt_past_the_context_is_refused_before_the_session_holds_it(small_context):
    """A prompt that with ``max_tokens`` passes the model's context is 400 ``context_length_exceeded`` naming the
    context, and no session holds it; one whose text alone passes it is refused without being rendered (on main both
    were rendered, answered and kept)."""
    from tito_audit.gateway.server import running

    loaded, folder = small_context
    served = gateway(loaded, folder, max_tokens=256, engine_api="sglang")  # SGLang refuses; vLLM lowers (below)
    prepared: list[int] = []  # the renders of the template
    render = loaded.renderer.prefixes

    def counted(*arguments, **named):
        prepared.append(1)
        return render(*arguments, **named)

    loaded.renderer.prefixes = counted
    try:
        with running(served) as url:
            long = chat(url, "long", [{"role": "user", "content": "ab c " * 1500}])
            assert long.status_code == 400, long.text
            error = long.json()["error"]
            assert error["code"] == "context_length_exceeded"
            assert "context of 4,096 tokens (config.json max_position_embeddings)" in error["message"]
            assert "max_tokens 256" in error["message"]
            assert record(url, "long").status_code == 404
            rendered = len(prepared)
            huge = chat(url, "huge", [{"role": "user", "content": "x" * 1_000_000}])
            assert huge.status_code == 400 and "alone" in huge.json()["error"]["message"]
            assert len(prepared) == rendered  # refused before the session was looked at: nothing rendered or tokenized
            assert httpx.get(f"{url}/healthz", timeout=TIMEOUT).json()["session_bytes"] == 0
            messages = [{"role": "user", "content": "ab c " * 500}]
            first = chat(url, "grows", messages)
            assert first.status_code == 200
            before = record(url, "grows").json()
            follow = [*messages, first.json()["choices"][0]["message"], {"role": "user", "content": "ab c " * 800}]
            assert chat(url, "grows", follow).json()["error"]["code"] == "context_length_exceeded"
            assert record(url, "grows").json() == before
    finally:
        del loaded.renderer.prefixes
