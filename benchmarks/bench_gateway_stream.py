"""The gateway's own time for one streamed turn, by the length of the completion: 500, 4,000 and 8,000 ids sent one id
per event, as vLLM's streamed completions send them.

An engine speaking vLLM's streamed ``/v1/completions`` runs in a process of its own on a loopback port and answers
every request with the same completion (prose with accents, CJK and emoji, then the stop token), one id per event.
The gateway (Qwen2.5-7B-Instruct's tokenizer, SGLang's ``qwen25`` parsers reading the pieces as they come, tools
declared) runs in this process; each turn is a streamed chat completion of a new session. Printed per length: the
gateway's time (``tito.gateway_ms`` of the last chunk: the server's time on the request minus its waits for the
engine's events) and the client's wall time, median of --repeat turns (the lengths taken in turn, so that a change in
the machine's load touches each), and the ratio of 8,000 ids to 4,000 (linear work: about 2; the whole completion
decoded again for every piece: about 4).

Bounded: --repeat turns per length, each with a client time-out. Run: ``make bench-gateway-stream`` or
``python benchmarks/bench_gateway_stream.py --mirror ../shared/tokenizers``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import textwrap
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import TOOLS  # the load benchmark's tools (get_weather, run_shell)

MODEL = "Qwen/Qwen2.5-7B-Instruct"
LENGTHS = (500, 4000, 8000)
PROSE = (
    "The café on the corner opens at seven; its crème brûlée is the best in town. 東京の天気は晴れです。 "
    "Emoji travel well 🚀🎉, and so do numbers like 3.14159 and 2,718. "
)

ENGINE = textwrap.dedent(
    """
    import json, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    ids = json.loads(sys.argv[1])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            count = min(int(body.get("max_tokens") or len(ids)), len(ids))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for number, token in enumerate(ids[:count]):
                last = number == count - 1
                choice = {"index": 0, "text": "", "token_ids": [token], "finish_reason": "stop" if last else None}
                self.wfile.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\\n\\n")
            self.wfile.write(b"data: [DONE]\\n\\n")
            self.wfile.flush()
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler)
    print("ready", flush=True)
    server.serve_forever()
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def completion(machinery, length: int) -> list[int]:
    """``length`` ids of prose, the last one the stop token."""
    ids: list[int] = []
    codec = machinery.codec
    while len(ids) < length - 1:
        ids += codec.encode(PROSE)
    stop = codec.id_of("<|im_end|>")
    return [*ids[: length - 1], stop]


def streamed_turn(url: str, session: str, max_tokens: int, timeout: float) -> tuple[float, float, int]:
    """(gateway ms, wall ms, content characters) of one streamed turn."""
    import httpx

    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Tell me about the café."}],
        "tools": TOOLS,
        "max_tokens": max_tokens,
        "stream": True,
    }
    started = time.perf_counter()
    tito, content = None, 0
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json=body, headers={"X-Session-Id": session}, timeout=timeout
    ) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.read()[:300]!r}")
        for line in response.iter_lines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            event = json.loads(line[5:])
            if "error" in event:
                raise RuntimeError(f"the stream ended with an error: {event['error']}")
            for choice in event.get("choices") or []:
                content += len(choice["delta"].get("content") or "")
            tito = event.get("tito", tito)
    wall = (time.perf_counter() - started) * 1000
    if tito is None or "gateway_ms" not in tito:
        raise RuntimeError("the stream's last chunk carries no tito record")
    return float(tito["gateway_ms"]), wall, content


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", action="append", default=[])
    parser.add_argument("--repeat", type=int, default=3, help="streamed turns per length (median printed)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a turn may take")
    args = parser.parse_args()

    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running
    from tito_audit.parse import sglang

    if not sglang.available():
        sys.exit(f"SGLang's parsers are needed (the streamed pieces are read by them): {sglang.INSTALL}")
    port = free_port()
    engine_url = f"http://127.0.0.1:{port}"
    config = GatewayConfig(
        MODEL, engine=engine_url, parser="qwen25", mirrors=args.mirror, allow_hub=False, engine_timeout=60
    )
    gateway = Gateway(config)
    ids = completion(gateway.machinery, max(LENGTHS))
    engine = subprocess.Popen(
        [sys.executable, "-c", ENGINE, json.dumps(ids), str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert engine.stdout is not None and engine.stdout.readline().strip() == "ready"
        runs: dict[int, list[tuple[float, float, int]]] = {length: [] for length in LENGTHS}
        with running(gateway) as url:
            streamed_turn(url, "warm-up", 50, args.timeout)
            for number in range(args.repeat):  # the lengths in turn: a change in the machine's load touches each
                for length in LENGTHS:
                    runs[length].append(streamed_turn(url, f"s{length}-{number}", length, args.timeout))
        figures: dict[int, tuple[float, float]] = {}
        for length, done in runs.items():
            figures[length] = (statistics.median(r[0] for r in done), statistics.median(r[1] for r in done))
            print(
                f"{length:>5} ids, one per event: gateway {figures[length][0] / 1000:7.3f} s "
                f"({figures[length][0] / length * 1000:.0f} us an id), wall {figures[length][1] / 1000:7.3f} s "
                f"({done[0][2]} characters of content)",
                flush=True,
            )
        ratio = figures[8000][0] / figures[4000][0]
        print(f"8,000 ids / 4,000 ids (gateway time): {ratio:.2f}x (linear: about 2; target: at most 2.5)")
    finally:
        engine.terminate()
        engine.wait(timeout=10)


if __name__ == "__main__":
    main()
