"""Large sessions in the gateway: the memory they hold against what they are charged, and reading a large record while
other requests come.

1. Memory (the gateway in this process, Qwen2.5-7B-Instruct's tokenizer, the fake engine): SESSIONS sessions of one
   user message of CHARS characters each (words and numbers, about 2.5 characters a token), for two shapes (many small
   sessions, a few long ones within the model's context). Printed: the resident memory they grew the process by, once
   the allocator gave its free memory back (``malloc_trim``) and without that, against the bytes the sessions are
   charged (``/healthz`` ``session_bytes``: what ``--max-session-bytes`` and ``--max-total-bytes`` bound).
2. A large record (``tito-audit serve ... --on-rewrite branch`` in a process of its own): one session of --branches
   branches, each holding a long first message, so that its record is tens of MB of JSON; then three processes read
   the record at once while this one asks ``/healthz`` every 10 ms. Printed: the record's size, the time to read it,
   and the slowest and median ``/healthz`` meanwhile.

Bounded: every request has a time-out and the server is stopped at the end. Run: ``make bench-gateway-large`` or
``python benchmarks/bench_gateway_large.py --mirror ../shared/tokenizers``.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODEL = "Qwen/Qwen2.5-7B-Instruct"
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu")
READER = (
    "import httpx, sys, time; t = time.perf_counter(); r = httpx.get(sys.argv[1], timeout=300); "
    "print(r.status_code, len(r.content), round(time.perf_counter() - t, 3))"
)


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    return 0


def text_of(chars: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(chars // 8))[:chars]


def memory(mirrors: list[str]) -> None:
    import httpx

    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.memory_budget import return_free_memory
    from tito_audit.gateway.server import running

    print("memory held against what the sessions are charged (Qwen2.5, fake engine):")
    for sessions, chars in ((200, 4_000), (8, 250_000)):
        config = GatewayConfig(MODEL, mirrors=mirrors, allow_hub=False, parser="template")
        rng = random.Random(0)
        with running(Gateway(config)) as url:

            def chat(session: str, text: str) -> httpx.Response:
                body = {"messages": [{"role": "user", "content": text}], "max_tokens": 64}
                return httpx.post(
                    url + "/v1/chat/completions", json=body, headers={"X-Session-Id": session}, timeout=600
                )

            chat("warm", "hi")
            httpx.delete(url + "/sessions/warm", timeout=60)
            gc.collect()
            return_free_memory()
            before = rss()
            for number in range(sessions):
                answered = chat(f"s{number}", text_of(chars, rng))
                if answered.status_code != 200:
                    sys.exit(f"HTTP {answered.status_code}: {answered.text[:300]}")
            gc.collect()
            untrimmed = rss() - before
            return_free_memory()
            trimmed = rss() - before
            charged = httpx.get(url + "/healthz", timeout=60).json()["session_bytes"]
            tokens = len(httpx.get(url + "/sessions/s0", timeout=60).json()["buffer"])
        print(
            f"  {sessions} sessions of {chars:,} characters ({tokens:,} tokens each): "
            f"charged {charged / 2**20:.1f} MiB; "
            f"resident memory grown {trimmed / 2**20:.1f} MiB once free memory is given back "
            f"({trimmed / charged:.2f}x), {untrimmed / 2**20:.1f} MiB before ({untrimmed / charged:.2f}x)",
            flush=True,
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def large_record(mirrors: list[str], branches: int) -> None:
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tito_audit", "serve", MODEL, "--engine", "fake", "--parser", "template"]
    command += [f"--mirror={m}" for m in mirrors] + ["--no-hub", "--on-rewrite", "branch", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(url + "/healthz", timeout=1)
                break
            except httpx.HTTPError:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"the server did not start: {server.stderr.read() if server.stderr else ''}")
                time.sleep(0.2)
        rng = random.Random(1)
        first = {"role": "user", "content": text_of(10_000, rng)}
        answer = httpx.post(
            url + "/v1/chat/completions", json={"messages": [first]}, headers={"X-Session-Id": "big"}, timeout=120
        ).json()["choices"][0]["message"]
        started = time.perf_counter()
        for number in range(branches):  # each rewrite of the last message is a new branch holding the long message
            messages = [first, answer, {"role": "user", "content": f"rewrite {number}"}]
            answered = httpx.post(
                url + "/v1/chat/completions", json={"messages": messages}, headers={"X-Session-Id": "big"}, timeout=120
            )
            if answered.status_code != 200:
                sys.exit(f"HTTP {answered.status_code}: {answered.text[:300]}")
        made = time.perf_counter() - started
        idle: list[float] = []
        for _ in range(50):  # the machine's own latency: /healthz with nothing else under way
            asked = time.perf_counter()
            httpx.get(url + "/healthz", timeout=60)
            idle.append(time.perf_counter() - asked)
            time.sleep(0.01)
        readers = [
            subprocess.Popen([sys.executable, "-c", READER, url + "/sessions/big"], stdout=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        health: list[float] = []
        while any(reader.poll() is None for reader in readers):
            asked = time.perf_counter()
            httpx.get(url + "/healthz", timeout=60)
            health.append(time.perf_counter() - asked)
            time.sleep(0.01)
        reads = [reader.communicate()[0].split() for reader in readers]
        size = int(reads[0][1])
        print(
            f"a record of {branches} branches ({made:.0f} s to make them): {size / 2**20:.1f} MiB of JSON, read three "
            f"times at once in {', '.join(r[2] for r in reads)} s; /healthz meanwhile ({len(health)} asked): slowest "
            f"{max(health) * 1000:.0f} ms, median {statistics.median(health) * 1000:.1f} ms (with nothing else under "
            f"way: slowest {max(idle) * 1000:.0f} ms, median {statistics.median(idle) * 1000:.1f} ms)",
            flush=True,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", action="append", default=[])
    parser.add_argument("--branches", type=int, default=600, help="branches of the large record's session")
    parser.add_argument("--skip-memory", action="store_true", help="only the large record")
    args = parser.parse_args()
    if not args.skip_memory:
        memory(args.mirror)
    large_record(args.mirror, args.branches)


if __name__ == "__main__":
    main()
