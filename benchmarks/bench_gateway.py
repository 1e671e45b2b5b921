"""Load on the gateway over loopback: many concurrent sessions, many turns each, with the built-in fake engine.

The gateway runs as ``tito-audit serve MODEL --engine fake`` in a process of its own on a free loopback port; this
script drives SESSIONS agents at once, each for TURNS turns (tool results after a call, a user turn after an
answer; every message carries its session's mark). Afterwards it checks, per session, that no turn was lost (the
session records TURNS turns and the answers came back numbered 1..TURNS), that there is no cross-talk (the session's
messages carry only its own mark, its buffer decodes to text holding its mark and no other), and that the loss mask
covers exactly the recorded completions. It prints p50/p99 of the gateway's overhead per turn (the time the server
spent on the request minus the engine's time, as the server reports it; and the client's round trip minus the
engine's time), throughput, and the server's resident memory after the run and after the sessions are deleted.

The fake engine's rate of non-canonical splits is printed for comparison with a real engine's
(``bench_gateway_llamacpp.py``, which ``make bench-gateway`` runs next).

Bounded: SESSIONS x TURNS requests, and the whole run stops after --deadline seconds whatever happens.
Run: ``make bench-gateway`` or ``python benchmarks/bench_gateway.py --mirror ../shared/tokenizers``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def agent(client, url: str, index: int, turns: int, stats: dict, prefix: str = "bench") -> None:
    mark = f"[agent-{index:03d}]"
    sid = f"{prefix}-{index:03d}"
    messages: list[dict] = [{"role": "user", "content": f"{mark} Check the weather, then the build."}]
    for turn in range(1, turns + 1):
        started = time.perf_counter()
        response = await client.post(
            f"{url}/v1/chat/completions",
            json={"model": "m", "messages": messages, "tools": TOOLS},
            headers={"X-Session-Id": sid},
        )
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            stats["errors"].append(f"{sid} turn {turn}: HTTP {response.status_code} {response.text[:200]}")
            return
        body = response.json()
        tito = body["tito"]
        if tito["session"] != sid or tito["turn"] != turn or response.headers.get("x-session-id") != sid:
            stats["errors"].append(f"{sid} turn {turn}: answered as {tito['session']} turn {tito['turn']}")
            return
        stats["server"].append(tito["gateway_ms"])
        stats["client"].append(elapsed - tito["engine_ms"])
        stats["engine"].append(tito["engine_ms"])
        message = body["choices"][0]["message"]
        messages.append({k: v for k, v in message.items() if v is not None})
        calls = message.get("tool_calls") or []
        if calls:
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"{mark} result {turn}"} for c in calls]
        else:
            messages.append({"role": "user", "content": f"{mark} Go on ({turn})."})
    stats["done"].append(sid)


def check(record: dict, index: int, turns: int, decode) -> list[str]:
    mark = f"[agent-{index:03d}]"
    problems = []
    if len(record["turns"]) != turns:
        problems.append(f"{len(record['turns'])} turns recorded, not {turns}")
    texts = [m.get("content") or "" for m in record["messages"] if m["role"] in ("user", "tool")]
    if not all(mark in t for t in texts):
        problems.append("a message without the session's mark")
    text = decode(record["buffer"])
    others = {t for t in text.split("[agent-")[1:] if not t.startswith(mark[7:])}
    if mark not in text or others:
        problems.append("the buffer holds another session's text")
    spans = sum(end - start for start, end in (t["completion"] for t in record["turns"]))
    if sum(record["loss_mask"]) != spans or len(record["loss_mask"]) != len(record["buffer"]):
        problems.append("the loss mask does not cover exactly the completions")
    return [f"session {index}: {p}" for p in problems]


def noncanonical(record: dict, codec) -> tuple[int, int]:
    """(completions whose ids are not the tokenizer's own encoding of their text, completions) in ``record``."""
    completions = [record["buffer"][start:end] for start, end in (t["completion"] for t in record["turns"])]
    return sum(ids != codec.encode(codec.decode(ids)) for ids in completions), len(completions)


async def drive(url: str, sessions: int, turns: int, deadline: float, decode, codec=None) -> dict:
    import httpx

    stats: dict = {"server": [], "client": [], "engine": [], "errors": [], "done": [], "noncanonical": [0, 0]}
    limits = httpx.Limits(max_connections=sessions + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as client:
        started = time.perf_counter()
        runs = [agent(client, url, i, turns, stats) for i in range(sessions)]
        try:
            await asyncio.wait_for(asyncio.gather(*runs), timeout=deadline)
        except asyncio.TimeoutError:
            stats["errors"].append(f"stopped at the {deadline:g} s deadline")
        stats["seconds"] = time.perf_counter() - started
        problems = []
        for index in range(sessions):
            response = await client.get(f"{url}/sessions/bench-{index:03d}")
            if response.status_code != 200:
                problems.append(f"session {index}: GET answered {response.status_code}")
                continue
            problems += check(response.json(), index, turns, decode)
            if codec is not None:
                split, total = noncanonical(response.json(), codec)
                stats["noncanonical"] = [stats["noncanonical"][0] + split, stats["noncanonical"][1] + total]
        stats["problems"] = problems
    return stats


async def uncontended(url: str, turns: int) -> dict:
    """One session alone: the gateway's own cost per turn without queueing behind other sessions."""
    import httpx

    stats: dict = {"server": [], "client": [], "engine": [], "errors": [], "done": []}
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        await agent(client, url, 999, turns, stats, prefix="alone")
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct")
    parser.add_argument("--mirror", action="append", default=[])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=600.0, help="Seconds after which the run stops.")
    parser.add_argument("--store", action="store_true", help="Keep the sessions in a SQLite file (serve --store).")
    args = parser.parse_args()
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([Path(m) for m in args.mirror], None, None, False, False, None, None)
    codec = machinery_for(args.model, source, None, ()).codec

    def decode(ids: list[int]) -> str:
        return codec.decode(ids)

    port = free_port()
    command = [sys.executable, "-m", "tito_audit", "serve", args.model, "--engine", "fake", "--parser", "template"]
    command += ["--port", str(port), "--no-hub", "--max-sessions", str(max(args.sessions, 1) * 2)]
    for mirror in args.mirror:
        command += ["--mirror", mirror]
    folder = tempfile.TemporaryDirectory(prefix="bench-gateway-")
    if args.store:
        command += ["--store", str(Path(folder.name) / "sessions.db")]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        ready = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                print("the gateway did not start:", (server.stderr.read() if server.stderr else "")[-500:])
                return 2
            try:
                if httpx.get(f"{url}/healthz", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > ready:
                print("the gateway did not start within 120 s")
                return 2
            time.sleep(0.2)
        idle_rss = rss_mib(server.pid)
        stats = asyncio.run(drive(url, args.sessions, args.turns, args.deadline, decode, codec))
        alone = asyncio.run(uncontended(url, args.turns))
        loaded_rss = rss_mib(server.pid)
        for index in range(args.sessions):
            httpx.delete(f"{url}/sessions/bench-{index:03d}", trust_env=False)
        httpx.delete(f"{url}/sessions/alone-999", trust_env=False)
        emptied_rss = rss_mib(server.pid)
        health = httpx.get(f"{url}/healthz", trust_env=False).json()
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        folder.cleanup()
    requests = len(stats["server"])
    kept = "sessions in a SQLite file (--store)" if args.store else "sessions in memory"
    print(f"gateway bench: {args.model}, {args.sessions} sessions x {args.turns} turns, fake engine, {kept}, loopback")
    print(
        f"  requests answered: {requests} of {args.sessions * args.turns} in {stats['seconds']:.1f} s "
        f"({requests / stats['seconds']:.1f} turns/s)"
    )
    print(
        f"  sessions complete: {len(stats['done'])}; "
        f"lost turns or cross-talk: {len(stats['errors'] + stats['problems'])}"
    )
    for line in (stats["errors"] + stats["problems"])[:10]:
        print("   ", line)
    for name, values in (
        ("server-side gateway overhead", stats["server"]),
        ("client round trip - engine", stats["client"]),
        ("fake engine", stats["engine"]),
    ):
        if values:
            print(
                f"  {name} per turn: p50 {percentile(values, 0.5):.2f} ms, p99 {percentile(values, 0.99):.2f} ms, "
                f"mean {statistics.fmean(values):.2f} ms"
            )
    for name, values in (
        ("alone: server-side overhead", alone["server"]),
        ("alone: round trip - engine", alone["client"]),
    ):
        if values:
            print(f"  {name} per turn: p50 {percentile(values, 0.5):.2f} ms, p99 {percentile(values, 0.99):.2f} ms")
    split, total = stats["noncanonical"]
    print(f"  completions with a non-canonical split: {split} of {total} ({split / max(total, 1):.0%})")
    print(
        f"  server RSS: {idle_rss:.0f} MiB idle, {loaded_rss:.0f} MiB with {args.sessions} sessions, "
        f"{emptied_rss:.0f} MiB after deleting them (sessions left: {health['sessions']})"
    )
    return (
        0
        if not stats["errors"] + alone["errors"] and not stats["problems"] and requests == args.sessions * args.turns
        else 1
    )


if __name__ == "__main__":
    sys.exit(main())
