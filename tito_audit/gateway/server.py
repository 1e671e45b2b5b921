"""Running the gateway: in the foreground for ``tito-audit serve``, or in a background thread (tests, benchmarks,
a trainer that keeps the gateway in its own process)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

from tito_audit.gateway.app import create_app
from tito_audit.gateway.gateway import Gateway

STARTUP_SECONDS = 30.0


def _server(gateway: Gateway, port: int | None = None):
    import uvicorn

    config = uvicorn.Config(
        create_app(gateway),
        host=gateway.config.host,
        port=gateway.config.port if port is None else port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)


def serve(gateway: Gateway, sock: socket.socket | None = None) -> None:
    """Serve until Ctrl-C (uvicorn stops on SIGINT and SIGTERM, finishing the requests under way); on ``sock`` when
    given (bound already: the command line binds before it says it serves, so a busy port is one error line)."""
    _server(gateway).run(sockets=[sock] if sock is not None else None)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running(gateway: Gateway, port: int | None = None) -> Iterator[str]:
    """Serve ``gateway`` in a background thread on a free loopback port; yields the base URL, stops on exit."""
    server = _server(gateway, port if port is not None else free_port(gateway.config.host))
    thread = threading.Thread(target=server.run, name="tito-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.02)
    try:
        yield f"http://{server.config.host}:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
