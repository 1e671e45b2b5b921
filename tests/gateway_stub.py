"""A token-in engine on a loopback port that answers as vLLM and SGLang do, or fails as they can (``mode``): ``ok``,
``5xx``, ``slow`` (1.5 s), ``garbage`` (not JSON), ``deep`` (JSON nested 100,000 levels), ``bad_ids`` (an id past
any vocabulary), ``empty`` (no ids at all, not even a stop token) or ``kill`` (the connection dropped)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StubEngine:
    """An engine on a loopback port whose next answers follow ``mode``; it records the bodies it got."""

    def __init__(self, answer_ids: list[int]) -> None:
        self.mode = "ok"
        self.bodies: list[dict] = []
        self.answer_ids = answer_ids
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.bodies.append({"path": self.path, **body})
                mode = stub.mode
                if mode == "kill":  # the engine dies with the request under way: no answer at all
                    self.connection.shutdown(2)
                    self.close_connection = True
                    return
                if mode == "slow":
                    time.sleep(1.5)
                if mode == "5xx":
                    return self._send(503, b'{"error": "overloaded"}')
                if mode == "garbage":
                    return self._send(200, b"<html>not json")
                if mode == "deep":  # an answer nested past what a JSON decoder reads
                    return self._send(200, b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
                ids = {"bad_ids": [10**9], "empty": []}.get(mode, stub.answer_ids)
                if self.path == "/generate":  # SGLang's shape, the matched stop token left out of output_ids
                    output = ids if mode in ("bad_ids", "empty") else ids[:-1]
                    finish = {"type": "stop", "matched": ids[-1] if ids else None}
                    answer = {"text": "", "output_ids": output, "meta_info": {"finish_reason": finish}}
                else:
                    answer = {"choices": [{"index": 0, "text": "", "token_ids": ids, "finish_reason": "stop"}]}
                self._send(200, json.dumps(answer).encode())

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError):  # the gateway stopped waiting (the timeout test)
                    self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
