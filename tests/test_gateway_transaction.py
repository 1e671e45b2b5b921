"""A request is one transaction on its session (``turn_transaction.Turn``): a failure anywhere in a turn (the engine,
the store's write, plain or streamed) leaves the session as it was, its lock free and its bytes given back, and the next
turn is answered; a server started again on the store holds exactly the turns it answered."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import dataclass, field

import pytest

from tests import templates

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
httpx = pytest.importorskip("httpx")


def gateway_on(folder, tiny_model_dir, store):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig

    template = folder / "good.jinja"
    template.write_text(templates.GOOD, encoding="utf-8")
    config = GatewayConfig(
        str(tiny_model_dir), template=str(template), allow_hub=False, parser="template", seed=3, store=store
    )
    return Gateway(config)


def chat(url: str, messages: list[dict], stream: bool = False) -> httpx.Response:
    body = {"model": "m", "messages": messages, "stream": stream}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": "t"}, timeout=60)


def answered(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    return {k: v for k, v in message.items() if v is not None}


def stream_end(response: httpx.Response) -> list[str]:
    """The data lines of a streamed answer's last two events."""
    return [line for line in response.text.splitlines() if line.startswith("data: ")][-2:]


def failing_once(gateway, where: str) -> list[str]:
    """Make the next turn fail at ``where`` (``engine``: the engine raises, or breaks off after its first piece when
    streamed; ``write``: the store's file is not written), once; the list grows by ``where`` when it did."""
    from tito_audit.gateway.errors import EngineError

    failed: list[str] = []
    if where == "engine":
        generate = gateway.engine.generate

        async def engine_fails(request):
            if not failed:
                failed.append(where)
                raise EngineError(502, "engine_unreachable", "the engine cannot be reached (refused)")
            return await generate(request)

        def stream_breaks(request):
            if failed:
                return stream(request)

            async def pieces():
                failed.append(where)
                async for piece in stream(request):
                    yield piece  # one piece out (streamed: the client has it), then the engine goes away
                    raise EngineError(502, "engine_unreachable", "the engine's stream broke off (reset)")

            return pieces()

        stream = gateway.engine.stream
        gateway.engine.generate, gateway.engine.stream = engine_fails, stream_breaks
    else:
        durable = gateway.durable

        class WriteFailsOnce:
            """The store's connection, whose write of the turn's row fails once: the session's row was updated in the
            same SQLite transaction, which is rolled back."""

            def __init__(self, connection: sqlite3.Connection) -> None:
                self.connection = connection

            def __enter__(self):
                return self.connection.__enter__()

            def __exit__(self, *exc):
                return self.connection.__exit__(*exc)

            def execute(self, sql: str, *args):
                if sql.startswith("INSERT INTO turns") and not failed:
                    failed.append(where)
                    raise sqlite3.OperationalError("disk I/O error")
                return self.connection.execute(sql, *args)

            def __getattr__(self, name: str):
                return getattr(self.connection, name)

        durable._connection = WriteFailsOnce(durable._connection)
    return failed


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("where", ["engine", "write"])
def test_a_turn_that_fails_midway_changes_nothing_and_the_next_turn_is_answered(
    tiny_model_dir, tmp_path, where, stream
):
    from tito_audit.gateway.server import running

    store = tmp_path / "sessions.db"
    gateway = gateway_on(tmp_path, tiny_model_dir, store)
    with running(gateway) as url:
        messages = [{"role": "user", "content": "Hello there."}]
        first = answered(chat(url, messages))
        messages += [first, {"role": "user", "content": "And then?"}]
        before = httpx.get(f"{url}/sessions/t").json()
        failed = failing_once(gateway, where)
        response = chat(url, messages, stream)
        assert failed == [where]
        code = "engine_unreachable" if where == "engine" else "store_failed"
        if stream:  # the stream began (its first piece, or its whole answer before the write): it ends with why not
            assert response.status_code == 200 and json.loads(stream_end(response)[-1][6:])["error"]["code"] == code
        else:
            assert response.status_code in (502, 507) and response.json()["error"]["code"] == code
        assert httpx.get(f"{url}/sessions/t").json() == before  # the session as it was: nothing of the turn kept
        entry = gateway.store.peek("t")
        assert entry is not None and not entry.busy and entry.reserved == 0
        if stream:
            ends = stream_end(chat(url, messages, stream))
            assert ends[-1] == "data: [DONE]"
            second = None
        else:
            second = answered(chat(url, messages))
        after = httpx.get(f"{url}/sessions/t").json()
        assert (
            len(after["turns"]) == len(before["turns"]) + 1
            and after["buffer"][: len(before["buffer"])] == (before["buffer"])
        )
        if second is not None:
            messages += [second, {"role": "user", "content": "Thanks."}]
            assert answered(chat(url, messages))
            after = httpx.get(f"{url}/sessions/t").json()
    gateway.close_store()
    again = gateway_on(tmp_path, tiny_model_dir, store)
    with running(again) as url:  # the file holds every turn answered, and only those
        assert httpx.get(f"{url}/sessions/t").json()["buffer"] == after["buffer"]
    again.close_store()


def test_a_first_turn_the_journal_refuses_leaves_no_session_and_no_lock():
    """The table alone: a journal that refuses the first turn's commit (the session ended meanwhile) leaves no entry,
    no lock held and no bytes reserved; the next request on the id opens and commits."""
    from tito_audit.gateway.errors import RequestError
    from tito_audit.gateway.session_entry import Pending
    from tito_audit.gateway.sessions import SessionStore

    class Refusing:
        def __init__(self) -> None:
            self.saved: list[int] = []

        def save(self, entry, kept) -> None:
            assert entry.session is None and entry.requests == 0  # the journal sees the session as it was
            if not self.saved:
                self.saved.append(0)
                raise RequestError(507, "store_failed", "not written")
            self.saved.append(kept.requests)

        def delete(self, entry) -> None:
            return None

    class Trial:
        held_bytes = 1000

    @dataclass
    class Step:
        trial: Trial = field(default_factory=Trial)
        history: list[dict] = field(default_factory=lambda: [{"role": "user", "content": "hi"}])
        sent: None = None
        on_commit: None = None
        retry: bool = False
        found: None = None
        ignored: list[str] = field(default_factory=lambda: ["metadata"])
        other_bytes: int = 0

    pending = Pending([1, 2, 3], {"role": "assistant", "content": "ok"}, {}, "stop", {})
    store = SessionStore(4, 60)
    journal = store.journal = Refusing()

    async def turn() -> None:
        async with store.turn("s") as transaction:
            transaction.reserve(Step(), 16)
            assert store.total_bytes > 1000
            transaction.commit(Step(), pending)

    with pytest.raises(RequestError):
        asyncio.run(turn())
    assert store.peek("s") is None and store.total_bytes == 0 and len(store) == 0
    asyncio.run(turn())
    entry = store.peek("s")
    assert entry is not None and not entry.busy and entry.reserved == 0
    assert entry.requests == 1 and entry.pending is pending and entry.ignored == {"metadata": 1}
    assert journal.saved == [0, 1] and entry.size == 1000 + 96 * 3
