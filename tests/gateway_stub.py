"""A token-in engine on a loopback port that answers as vLLM and SGLang do, or fails as they can (``mode``): ``ok``,
``5xx``, ``slow`` (1.5 s), ``garbage`` (not JSON), ``deep`` (JSON nested 100,000 levels), ``bad_ids`` (an id past
any vocabulary), ``empty`` (no ids at all, not even a stop token), ``kill`` (the connection dropped) or
``bad_logprobs`` (log-probabilities naming other ids than those sampled). Streamed requests (``stream: true``) get
the engines' server-sent events; ``kill_mid``, ``slow_mid``, ``garbage_mid`` and ``error_mid`` break off after the
first event.

Log-probabilities come in the shape each engine writes them when asked (vLLM's ``_create_completion_logprobs`` with
``return_tokens_as_token_ids``: ``token_id:N`` tokens, ``token_logprobs``, ``top_logprobs`` dicts holding the sampled
token and the K most likely; SGLang's ``meta_info.output_token_logprobs``/``output_top_logprobs``: ``[logprob, id,
null]`` triples): ``answer_logprobs`` per id, and per id the alternatives ``top`` (``(id, logprob)``). SGLang leaves
the matched stop token out of ``output_ids``; ``sglang_stop_logprob`` says whether its triple stays in the
log-probabilities (both are read)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StubEngine:
    """An engine on a loopback port whose next answers follow ``mode``; it records the bodies it got."""

    def __init__(
        self,
        answer_ids: list[int],
        answer_logprobs: list[float] | None = None,
        top: list[list[tuple[int, float]]] | None = None,
    ) -> None:
        self.mode = "ok"
        self.sglang_incremental = False
        self.slow_seconds = 1.5
        self.bodies: list[dict] = []
        self.answer_ids = answer_ids
        self.answer_logprobs = answer_logprobs
        self.top = top
        self.sglang_stop_logprob = False
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
                    time.sleep(stub.slow_seconds)
                if mode == "5xx":
                    return self._send(503, b'{"error": "overloaded"}')
                if mode == "garbage":
                    return self._send(200, b"<html>not json")
                if mode == "deep":  # an answer nested past what a JSON decoder reads
                    return self._send(200, b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
                ids = {"bad_ids": [10**9], "empty": []}.get(mode, stub.answer_ids)
                named = [i + 1 for i in ids] if mode == "bad_logprobs" else ids
                if body.get("stream"):
                    return self._stream(ids, mode)
                if self.path == "/generate":  # SGLang's shape, the matched stop token left out of output_ids
                    output = ids if mode in ("bad_ids", "empty") else ids[:-1]
                    finish = {"type": "stop", "matched": ids[-1] if ids else None}
                    meta: dict = {"finish_reason": finish}
                    if body.get("return_logprob") and stub.answer_logprobs is not None:
                        kept = len(ids) if stub.sglang_stop_logprob else len(output)
                        triples = [[v, i, None] for v, i in zip(stub.answer_logprobs, named, strict=False)][:kept]
                        meta["output_token_logprobs"] = triples
                        if body.get("top_logprobs_num") and stub.top is not None:
                            meta["output_top_logprobs"] = [[[v, i, None] for i, v in row] for row in stub.top][:kept]
                    answer = {"text": "", "output_ids": output, "meta_info": meta}
                else:
                    choice = {"index": 0, "text": "", "token_ids": ids, "finish_reason": "stop", "stop_reason": None}
                    if body.get("logprobs") is not None and stub.answer_logprobs is not None:
                        choice["logprobs"] = vllm_logprobs(named, stub.answer_logprobs, stub.top, body["logprobs"])
                    answer = {"id": "cmpl-1", "object": "text_completion", "choices": [choice]}
                self._send(200, json.dumps(answer).encode())

            def _stream(self, ids: list[int], mode: str) -> None:
                """vLLM's events (new token_ids each) or SGLang's (all output_ids so far, or only the new ones when
                ``sglang_incremental``), two ids at a time; ``*_mid`` modes break off after the first event."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                sglang = self.path == "/generate"
                pieces = [ids[i : i + 2] for i in range(0, len(ids), 2)] or [[]]
                for number, piece in enumerate(pieces):
                    last = number == len(pieces) - 1
                    if number == 1 and mode.endswith("_mid"):
                        if mode == "kill_mid":
                            self.wfile.flush()
                            self.connection.shutdown(2)
                            self.close_connection = True
                            return
                        if mode == "slow_mid":
                            time.sleep(stub.slow_seconds)
                        if mode == "garbage_mid":
                            self._event(b"<html>not json")
                            return
                        if mode == "error_mid":
                            self._event(b'{"error": {"message": "the engine ran out of memory"}}')
                            return
                    if sglang:
                        done = sum(len(p) for p in pieces[: number + 1])
                        output = piece if stub.sglang_incremental else ids[:done]
                        finish = {"type": "stop", "matched": ids[-1]} if last and ids else None
                        if last and ids:  # the matched stop token left out of output_ids, as SGLang does
                            output = output[:-1]
                        meta = {"finish_reason": finish, "completion_tokens": done}
                        event = {"text": "", "output_ids": output, "meta_info": meta}
                    else:
                        choice = {"index": 0, "text": "", "token_ids": piece, "finish_reason": "stop" if last else None}
                        event = {"choices": [choice]}
                    if not self._event(json.dumps(event).encode()):
                        return
                self._event(b"[DONE]")

            def _event(self, data: bytes) -> bool:
                try:
                    self.wfile.write(b"data: " + data + b"\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the gateway closed the stream
                    return False
                return True

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


def vllm_logprobs(ids: list[int], values: list[float], top: list[list[tuple[int, float]]] | None, k: int) -> dict:
    """``choices[0].logprobs`` as vLLM writes it with ``return_tokens_as_token_ids``: per token ``token_id:N``, its
    log-probability, and a dict of the sampled token then the ``k`` most likely."""
    tops = []
    for position, (token, value) in enumerate(zip(ids, values, strict=False)):
        row = {f"token_id:{token}": value}
        for other, other_value in (top[position] if top else [])[:k]:
            row.setdefault(f"token_id:{other}", other_value)
        tops.append(row)
    return {
        "text_offset": list(range(len(ids))),
        "token_logprobs": values,
        "tokens": [f"token_id:{token}" for token in ids],
        "top_logprobs": tops,
    }
