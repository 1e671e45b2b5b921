"""The stand-in model behind HTTP on 127.0.0.1, answering as the engines the gateway talks to answer:

- vLLM's ``POST /v1/completions`` (``prompt``: token ids; ``max_tokens``, ``stop_token_ids``, ``logprobs``,
  ``seed``): ``choices[0].token_ids``, ``text``, ``finish_reason`` and ``stop_reason`` (the stop id it ended on), and
  with ``logprobs`` the ``tokens`` named ``token_id:N``, their ``token_logprobs`` and ``top_logprobs``; streamed
  (``stream: true``) as server-sent events carrying the new ids, then ``data: [DONE]``;
- SGLang's ``POST /generate`` (``input_ids``, ``sampling_params``: ``max_new_tokens``, ``stop_token_ids``,
  ``sampling_seed``; ``return_logprob``, ``top_logprobs_num``): ``output_ids``, ``text`` and ``meta_info``
  (``finish_reason``: ``{"type": "stop", "matched": ID}`` or ``{"type": "length"}``, token counts,
  ``output_token_logprobs``); streamed with the ids so far in every event (SGLang's default);
- ``GET /v1/models``, ``GET /health``.

Log-probabilities are drawn as the fake engine draws them (:func:`tito_audit.gateway.fake.drawn_logprobs`). A request
it cannot serve is answered 400 (a body that is not what the engine reads), 404 (another model's name, as vLLM does)
or 500 (a template that refuses every turn), with one line on standard error.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tito_audit.gateway.errors import StandinRefused
from tito_audit.gateway.fake import drawn_logprobs
from tito_audit.gateway.standin.model import StandinModel, StandinTurn
from tito_audit.model.render import RenderError

PIECE_IDS = 4
"""Ids per event of a streamed answer."""
MAX_BODY = 64 << 20


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


class StandinServer:
    """:class:`StandinModel` served on ``host``:``port`` (0: a free port) in threads of this process, as ``name``."""

    def __init__(self, model: StandinModel, name: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.model = model
        self.name = name
        self.server = _Server((host, port), _handler(self))
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.served = 0
        self._thread = threading.Thread(target=self.server.serve_forever, name="standin-engine", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        with contextlib.suppress(OSError):
            self.server.server_close()

    # -- answers ------------------------------------------------------------------------------------------------------
    def turn(self, prompt: Any, max_tokens: Any, stop_ids: Any, seed: Any) -> StandinTurn:
        if not isinstance(prompt, list) or not prompt or not all(type(i) is int for i in prompt):
            raise StandinRefused(400, "the prompt must be a non-empty list of token ids")
        if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
            raise StandinRefused(400, "max_tokens must be a positive integer")
        if stop_ids is not None and (not isinstance(stop_ids, list) or not all(type(i) is int for i in stop_ids)):
            raise StandinRefused(400, "stop_token_ids must be a list of token ids")
        limit = self.model.machinery.codec.id_limit
        if any(i < 0 or i >= limit for i in prompt):
            raise StandinRefused(400, f"a prompt id is outside the vocabulary (0..{limit - 1})")
        try:
            turn = self.model.complete(prompt, max_tokens, stop_ids or [], seed)
        except RenderError as exc:
            raise StandinRefused(500, f"the stand-in model cannot write a turn here: {exc}") from None
        self.served += 1
        return turn

    def logprobs(self, turn: StandinTurn, top: int) -> tuple[list[float | None], list[list[tuple[int, float]]] | None]:
        key = f"standin:{self.model.seed}:{self.served}:{turn.ids[:8]}"
        stops = self.model.machinery.stop_ids
        return drawn_logprobs(key, turn.ids, stops, top, self.model.machinery.codec.id_limit)

    def vllm(self, body: dict[str, Any]) -> tuple[StandinTurn, dict[str, Any]]:
        self._check_model(body.get("model"))
        turn = self.turn(body.get("prompt"), body.get("max_tokens", 16), body.get("stop_token_ids"), body.get("seed"))
        choice: dict[str, Any] = {
            "index": 0,
            "text": turn.text,
            "token_ids": turn.ids,
            "finish_reason": turn.finish_reason,
            "stop_reason": turn.matched,
            "logprobs": None,
        }
        top = body.get("logprobs")
        if type(top) is int:
            values, alternatives = self.logprobs(turn, top)
            choice["logprobs"] = {
                "tokens": [f"token_id:{i}" for i in turn.ids],
                "token_logprobs": values,
                "top_logprobs": [{f"token_id:{i}": v for i, v in row} for row in alternatives]
                if alternatives
                else None,
            }
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(turn.ids)}
        answer = {"id": f"cmpl-standin-{self.served}", "object": "text_completion", "model": self.name}
        return turn, {**answer, "choices": [choice], "usage": usage}

    def sglang(self, body: dict[str, Any]) -> tuple[StandinTurn, dict[str, Any]]:
        sampling = body.get("sampling_params") or {}
        if not isinstance(sampling, dict):
            raise StandinRefused(400, "sampling_params must be an object")
        turn = self.turn(
            body.get("input_ids"),
            sampling.get("max_new_tokens", 128),
            sampling.get("stop_token_ids"),
            sampling.get("sampling_seed"),
        )
        finish: dict[str, Any] = (
            {"type": "stop", "matched": turn.matched}
            if turn.finish_reason == "stop"
            else {"type": "length", "length": len(turn.ids)}
        )
        meta: dict[str, Any] = {
            "id": f"standin-{self.served}",
            "finish_reason": finish,
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(turn.ids),
        }
        if body.get("return_logprob"):
            top = body.get("top_logprobs_num") or 0
            values, alternatives = self.logprobs(turn, int(top) if type(top) is int else 0)
            meta["output_token_logprobs"] = [[v, i, None] for v, i in zip(values, turn.ids, strict=True)]
            if alternatives:
                meta["output_top_logprobs"] = [[[v, i, None] for i, v in row] for row in alternatives]
        return turn, {"text": turn.text, "output_ids": turn.ids, "meta_info": meta}

    def _check_model(self, name: Any) -> None:
        if name is not None and name != self.name:
            raise StandinRefused(404, f"The model `{name}` does not exist.")


def _handler(served: StandinServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": served.name, "object": "model"}]})
            else:
                self._refuse(404, f"no route {self.path}")

        def do_POST(self) -> None:
            try:
                body = self._body()
                if self.path == "/v1/completions":
                    answer = served.vllm(body)[1]
                    self._stream_vllm(answer) if body.get("stream") else self._json(200, answer)
                elif self.path == "/generate":
                    answer = served.sglang(body)[1]
                    self._stream_sglang(answer) if body.get("stream") else self._json(200, answer)
                else:
                    raise StandinRefused(404, f"no route {self.path}")
            except StandinRefused as exc:
                self._refuse(exc.status, str(exc))

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            if length <= 0 or length > MAX_BODY:
                raise StandinRefused(400, f"a request body of 1 to {MAX_BODY} bytes is needed")
            try:
                body = json.loads(self.rfile.read(length))
            except (ValueError, RecursionError):
                raise StandinRefused(400, "the request body is not JSON") from None
            if not isinstance(body, dict):
                raise StandinRefused(400, "the request body must be a JSON object")
            return body

        def _refuse(self, status: int, message: str) -> None:
            print(f"standin engine: {status} {self.command} {self.path}: {message}", file=sys.stderr, flush=True)
            self._json(status, {"error": {"message": message, "code": status}})

        def _json(self, status: int, value: Any) -> None:
            payload = json.dumps(value, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(payload)

        def _events(self, events: list[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for event in events:
                    self.wfile.write(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        def _stream_vllm(self, answer: dict[str, Any]) -> None:
            choice = answer["choices"][0]
            ids = choice["token_ids"]
            events = []
            for start in range(0, max(len(ids), 1), PIECE_IDS):
                last = start + PIECE_IDS >= len(ids)
                piece = {"index": 0, "token_ids": ids[start : start + PIECE_IDS], "finish_reason": None}
                if last:
                    piece.update(finish_reason=choice["finish_reason"], stop_reason=choice["stop_reason"])
                events.append({"id": answer["id"], "object": "text_completion", "choices": [piece]})
            self._events(events)

        def _stream_sglang(self, answer: dict[str, Any]) -> None:
            ids, meta = answer["output_ids"], answer["meta_info"]
            events = []
            for end in range(PIECE_IDS, len(ids) + PIECE_IDS, PIECE_IDS):
                last = end >= len(ids)
                info = {**meta, "finish_reason": meta["finish_reason"] if last else None}
                info["completion_tokens"] = min(end, len(ids))
                events.append({"output_ids": ids[: min(end, len(ids))], "meta_info": info})
            self._events(events or [{"output_ids": [], "meta_info": meta}])

    return Handler
