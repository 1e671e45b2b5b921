"""A misbehaving token-in engine on a loopback port, speaking vLLM's ``/v1/completions`` (whole, or streamed as vLLM
streams: server-sent events with the new ``token_ids``), whose answer to each request a test decides.

``plan(body) -> Plan`` says, per request: the ids, how many per event, the pause between events, whether to wait for
an event a test sets first (``hold``), to stream the ids again and again for ever (``endless``), to send events
without ids for ever (``idle``), or to trickle a non-streamed answer a byte at a time (``trickle``). The engine
records the bodies it got, how many requests it serves at once (and at most), and the requests whose client went
away before the answer ended (``closed``)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Plan:
    ids: list[int]
    per_event: int = 1
    gap: float = 0.0
    hold: threading.Event | None = None
    endless: bool = False
    idle: bool = False
    trickle: bool = False
    finish: str = "stop"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512


class HostileEngine:
    def __init__(self, plan: Callable[[dict], Plan]) -> None:
        self.plan = plan
        self.bodies: list[dict] = []
        self.active = 0
        self.most = 0
        self.closed = 0
        self.lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with engine.lock:
                    engine.bodies.append(body)
                    engine.active += 1
                    engine.most = max(engine.most, engine.active)
                try:
                    plan = engine.plan(body)
                    if plan.hold is not None:
                        plan.hold.wait(timeout=60)
                    finished = self._stream(plan) if body.get("stream") else self._whole(plan)
                    if not finished:
                        with engine.lock:
                            engine.closed += 1
                finally:
                    with engine.lock:
                        engine.active -= 1
                self.close_connection = True

            def _whole(self, plan: Plan) -> bool:
                choice = {"index": 0, "text": "", "token_ids": plan.ids, "finish_reason": plan.finish}
                payload = json.dumps({"id": "cmpl-h", "object": "text_completion", "choices": [choice]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    if plan.trickle:
                        for byte in payload:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            time.sleep(plan.gap)
                    else:
                        self.wfile.write(payload)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return False
                return True

            def _stream(self, plan: Plan) -> bool:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                pieces = [plan.ids[i : i + plan.per_event] for i in range(0, len(plan.ids), plan.per_event)]
                number = 0
                while True:
                    if plan.idle:
                        event = {"choices": [{"index": 0, "text": "", "token_ids": [], "finish_reason": None}]}
                    else:
                        piece = pieces[number % len(pieces)]
                        last = not plan.endless and number == len(pieces) - 1
                        finish = plan.finish if last else None
                        event = {"choices": [{"index": 0, "text": "", "token_ids": piece, "finish_reason": finish}]}
                    if not self._event(json.dumps(event).encode()):
                        return False
                    number += 1
                    if not (plan.endless or plan.idle) and number == len(pieces):
                        return self._event(b"[DONE]")
                    if plan.gap:
                        time.sleep(plan.gap)

            def _event(self, data: bytes) -> bool:
                try:
                    self.wfile.write(b"data: " + data + b"\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return False
                return True

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        with contextlib.suppress(OSError):
            self.server.server_close()


def prompt_text(machinery, body: dict) -> str:
    """The prompt the gateway sent, as text (tests key their plans on what the conversation says)."""
    return machinery.codec.decode(body["prompt"])
