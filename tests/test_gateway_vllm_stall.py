"""``serve --parser vllm`` with vLLM's worker stopped mid-parse: the stalled turn waits (and fails once the worker is
ended), while an unrelated session's read answers at once and another session's turn is parsed by another worker.
Bounded on 127.0.0.1: every request has a timeout, the stopped worker is killed at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest

from tests.conftest import requires_shared
from tests.test_gateway import MODEL, TOOLS, machinery  # noqa: F401 (the fixture)
from tito_audit.parse import vllm, vllm_process

httpx = pytest.importorskip("httpx")
pytestmark = [
    requires_shared,
    pytest.mark.shared,
    pytest.mark.skipif(not vllm.available(), reason=f"vLLM's parsers are not installed ({vllm.INSTALL})"),
]

READ_SECONDS = 5.0
"""An unrelated read answers within this while a parse is stalled (it took 119 s)."""
TURN_SECONDS = 150.0
"""Another session's turn answers within this (a second worker starts: vLLM's import, on a busy machine); it took
the stalled request's whole 120 s and more."""


def turn(url: str, session: str, timeout: float) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": session}, timeout=timeout)


def test_a_stalled_parse_delays_only_its_own_turn(machinery):  # noqa: F811
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    gateway = Gateway(GatewayConfig(MODEL, parser="vllm", seed=3), machinery=machinery)
    with running(gateway) as url:
        assert turn(url, "a1", 120).status_code == 200
        stalled_worker, _ = vllm_process.worker()
        os.kill(stalled_worker.process.pid, signal.SIGSTOP)
        answers: dict[str, httpx.Response | BaseException] = {}

        def stalled_turn() -> None:
            try:
                answers["b"] = turn(url, "b", 300)
            except BaseException as exc:  # reported below
                answers["b"] = exc

        stalled = threading.Thread(target=stalled_turn, daemon=True)
        try:
            stalled.start()
            time.sleep(3)  # b's parse waits on the stopped worker now
            assert stalled.is_alive(), "the turn did not reach the stopped worker"
            started = time.monotonic()
            read = httpx.get(f"{url}/sessions/a1", timeout=READ_SECONDS + 5)
            read_seconds = time.monotonic() - started
            assert read.status_code == 200 and read_seconds < READ_SECONDS, f"the read took {read_seconds:.1f}s"
            started = time.monotonic()
            other = turn(url, "c", TURN_SECONDS + 30)
            other_seconds = time.monotonic() - started
            assert other.status_code == 200, other.text
            assert other_seconds < TURN_SECONDS, f"another session's turn took {other_seconds:.1f}s"
            assert stalled.is_alive(), "the stalled turn should still wait on its worker"
        finally:
            with contextlib.suppress(ProcessLookupError):  # ended already when its request ran out of time
                os.kill(stalled_worker.process.pid, signal.SIGKILL)
            stalled.join(timeout=60)
        assert not stalled.is_alive()
        failed = answers["b"]
        assert isinstance(failed, httpx.Response) and failed.status_code >= 500, failed
        assert "\n" not in failed.json()["error"]["message"]
