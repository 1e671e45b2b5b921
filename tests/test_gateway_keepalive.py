"""An engine that closes a connection without answering the request that went out on it (the race every keep-alive
server has: it closed an idle connection as the gateway reused it) gets the request once more on a fresh connection;
one that answers nothing twice is the engine's fault (502). Claude Code met the first as 502 ``engine_unreachable``."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("httpx")

ANSWER = {"choices": [{"token_ids": [5, 6, 2], "finish_reason": "stop", "stop_reason": None, "logprobs": None}]}


async def _engine(dropped: int) -> tuple[asyncio.AbstractServer, list[int]]:
    """A vLLM-shaped engine on 127.0.0.1 that closes the first ``dropped`` connections once it read their request."""
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        seen.append(len(seen))
        if len(seen) > dropped:
            body = json.dumps(ANSWER).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0), seen


@pytest.mark.parametrize(("dropped", "status"), [(1, None), (2, 502)])
def test_a_request_the_engine_never_answered_is_sent_once_more(dropped, status):
    from tito_audit.gateway.errors import EngineError
    from tito_audit.gateway.sampling_engines import EngineRequest, HttpEngine

    async def scenario() -> tuple[object, list[int]]:
        server, seen = await _engine(dropped)
        port = server.sockets[0].getsockname()[1]
        engine = HttpEngine(f"http://127.0.0.1:{port}", "vllm", 10)
        request = EngineRequest(prompt_ids=[1, 2, 3], sampling={"max_tokens": 8}, stop_ids=[2], model="m")
        try:
            return await engine.generate(request), seen
        except EngineError as exc:
            return exc, seen
        finally:
            await engine.close()
            server.close()

    got, seen = asyncio.run(scenario())
    assert len(seen) == 2  # the request went out twice, never a third time
    if status is None:
        assert list(got.ids) == [5, 6, 2]
    else:
        assert got.status == status and got.code == "engine_unreachable"
