"""Load on the gateway over loopback: many concurrent sessions, many turns each, with the built-in fake engine.

The gateway runs as ``tito-audit serve MODEL --engine fake`` in a process of its own on a free loopback port; this
script drives SESSIONS agents at once, each for TURNS turns (tool results after a call, a user turn after an
answer; every message carries its session's mark). Afterwards it checks, per session, that no turn was lost (the
session records TURNS turns and the answers came back numbered 1..TURNS), that there is no cross-talk (the session's
messages carry only its own mark, its buffer decodes to text holding its mark and no other), and that the loss mask
covers exactly the recorded completions. It prints p50/p99 of the gateway's overhead per turn (the time the server
spent on the request minus the engine's time, as the server reports it; and the client's round trip minus the
engine's time), throughput, and the server's resident memory after the run and after the sessions are deleted.

Then long sessions (``--long-sessions``, one at a time, ``--long-turns`` turns each, every turn a tool call answered
by a tool output of about ``--long-output`` characters, so that the conversation holds some 100,000 tokens by its
last turn): the gateway's own time per turn (server-side, engine excluded) at turn 10 and at the last turn, each the
median over the sessions of a five-turn window ending there, and what reading each session's record costs (the record
runs the full check of the steps bridged without rendering the history, ``--bridge auto``).

Bounded: SESSIONS x TURNS requests (and the long sessions), and the whole run stops after --deadline seconds whatever
happens.
Run: ``make bench-gateway`` or ``python benchmarks/bench_gateway.py --mirror ../shared/tokenizers``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


RESPONSES_TOOLS = [{"type": "function", **tool["function"]} for tool in TOOLS]
MESSAGES_TOOLS = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in TOOLS
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


async def call(client, url: str, dialect: str, stream: bool, sid: str, state: dict) -> tuple[dict, dict, float]:
    """One turn in ``dialect``: (the answer as a chat message, the ``tito`` record, ms to the first event)."""
    messages = state["messages"]
    if dialect == "chat":
        path, body = "/v1/chat/completions", {"model": "m", "messages": messages, "tools": TOOLS}
        if state.get("tool_choice"):
            body["tool_choice"] = state["tool_choice"]
    elif dialect == "responses":
        path, body = "/v1/responses", {"model": "m", "input": state["items"], "tools": RESPONSES_TOOLS}
        if state.get("previous"):
            body["previous_response_id"] = state["previous"]
    else:
        path, body = "/v1/messages", {"model": "m", "max_tokens": 2048, "messages": anthropic_messages(messages)}
        body["tools"] = MESSAGES_TOOLS
    body["stream"] = stream
    started = time.perf_counter()
    headers = {"X-Session-Id": sid}
    if not stream:
        response = await client.post(url + path, json=body, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code} {response.text[:200]}")
        first = (time.perf_counter() - started) * 1000
        return (*answer_of(dialect, response.json()), first)
    events, first = [], None
    async with client.stream("POST", url + path, json=body, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code} {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                first = first if first is not None else (time.perf_counter() - started) * 1000
                events.append(json.loads(line[5:]))
    return (*reassembled(dialect, events), first or 0.0)


def answer_of(dialect: str, body: dict) -> tuple[dict, dict]:
    if dialect == "chat":
        return body["choices"][0]["message"], body["tito"]
    if dialect == "responses":
        return responses_message(body["output"]), body["tito"] | {"response": body["id"]}
    calls = [
        {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
        for b in body["content"]
        if b["type"] == "tool_use"
    ]
    text = "".join(b["text"] for b in body["content"] if b["type"] == "text")
    thinking = "".join(b["thinking"] for b in body["content"] if b["type"] == "thinking")
    message = {"role": "assistant", "content": text or None, "tool_calls": calls or None}
    return message | ({"reasoning_content": thinking} if thinking else {}), body["tito"]


def responses_message(output: list[dict]) -> dict:
    message: dict = {"role": "assistant", "content": None}
    for item in output:
        if item["type"] == "message":
            message["content"] = "".join(part["text"] for part in item["content"])
        elif item["type"] == "reasoning":
            message["reasoning_content"] = "".join(part["text"] for part in item["content"])
        elif item["type"] == "function_call":
            call = {"id": item["call_id"], "type": "function"}
            call["function"] = {"name": item["name"], "arguments": item["arguments"]}
            message.setdefault("tool_calls", []).append(call)
    return message


def reassembled(dialect: str, events: list[dict]) -> tuple[dict, dict]:
    """The answer a streamed turn's events add up to, and its ``tito`` record."""
    if dialect == "responses":
        done = next(e["response"] for e in events if e.get("type") in ("response.completed", "response.incomplete"))
        return responses_message(done["output"]), done["tito"] | {"response": done["id"]}
    if dialect == "messages":
        blocks: dict[int, dict] = {}
        tito: dict = {}
        for event in events:
            if event["type"] == "content_block_start":
                blocks[event["index"]] = dict(event["content_block"]) | {"partial": ""}
            elif event["type"] == "content_block_delta":
                block, delta = blocks[event["index"]], event["delta"]
                key = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial"}[delta["type"]]
                block[key] += delta.get(key if key != "partial" else "partial_json", "")
            elif event["type"] == "message_delta":
                tito = event["tito"]
        for block in blocks.values():
            if block["type"] == "tool_use":
                block["input"] = json.loads(block["partial"] or "{}")
        return answer_of("messages", {"content": list(blocks.values()), "tito": tito})
    message: dict = {"role": "assistant", "content": ""}
    calls: dict[int, dict] = {}
    tito = {}
    for event in events:
        tito = event.get("tito") or tito
        for choice in event.get("choices") or []:
            delta = choice["delta"]
            message["content"] += delta.get("content") or ""
            if delta.get("reasoning_content"):
                message["reasoning_content"] = message.get("reasoning_content", "") + delta["reasoning_content"]
            for piece in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    piece["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] = piece.get("id") or slot["id"]
                slot["function"]["name"] += piece.get("function", {}).get("name") or ""
                slot["function"]["arguments"] += piece.get("function", {}).get("arguments") or ""
    message["content"] = message["content"] or None
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message, tito


def anthropic_messages(messages: list[dict]) -> list[dict]:
    """The chat history as Messages-API messages (tool results in a user message, calls as tool_use blocks)."""
    out: list[dict] = []
    for message in messages:
        if message["role"] == "assistant":
            blocks = [{"type": "text", "text": message["content"]}] if message.get("content") else []
            blocks += [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "input": json.loads(c["function"]["arguments"]),
                }
                for c in message.get("tool_calls") or []
            ]
            out.append({"role": "assistant", "content": blocks})
        elif message["role"] == "tool":
            result = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": message["content"]}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
        else:
            out.append({"role": "user", "content": message["content"]})
    return out


def tool_output(mark: str, turn: int, size: int) -> str:
    """A tool output of about ``size`` characters, its text new at every turn (what a shell or a file viewer
    returns)."""
    lines, length, n = [f"{mark} result {turn}"], 0, 0
    while length < size:
        line = f"{n:5d}  def handler_{turn}_{n}(request): return dispatch(request, route='/api/v{turn}/{n}')"
        lines.append(line)
        length += len(line) + 1
        n += 1
    return "\n".join(lines)


async def agent(client, url: str, index: int, turns: int, stats: dict, options: dict, prefix: str = "bench") -> None:
    import httpx

    mark = f"[agent-{index:03d}]"
    sid = f"{prefix}-{index:03d}"
    first = {"role": "user", "content": f"{mark} Check the weather, then the build."}
    state: dict = {"messages": [first], "items": [first], "tool_choice": options.get("tool_choice")}
    for turn in range(1, turns + 1):
        started = time.perf_counter()
        if options["rewrite_at"] and turn == options["rewrite_at"]:  # the harness truncates an older tool output
            older = next((m for m in state["messages"] if m["role"] == "tool"), None)
            if older is not None:
                older["content"] = older["content"].split(" result")[0] + " [cut]"  # the mark stays
        try:
            try:
                message, tito, first_ms = await call(client, url, options["dialect"], options["stream"], sid, state)
            except (httpx.ReadError, httpx.RemoteProtocolError):  # a dropped connection: the same request again
                stats["dropped"].append(sid)  # (the session is as it was, or the turn is sampled again: a retry)
                message, tito, first_ms = await call(client, url, options["dialect"], options["stream"], sid, state)
        except Exception as exc:
            stats["errors"].append(f"{sid} turn {turn}: {exc!r}")
            return
        elapsed = (time.perf_counter() - started) * 1000
        if tito.get("session") != sid or tito.get("turn") != turn:
            stats["errors"].append(f"{sid} turn {turn}: answered as {tito.get('session')} turn {tito.get('turn')}")
            return
        stats["server"].append(tito["gateway_ms"])
        stats.setdefault("by_turn", []).append((turn, tito["gateway_ms"], tito.get("prompt_tokens", 0)))
        stats.setdefault("cpu_by_turn", []).append((turn, tito.get("gateway_cpu_ms", float("nan")), 0))
        stats["client"].append(elapsed - tito["engine_ms"])
        stats["engine"].append(tito["engine_ms"])
        stats["first"].append(first_ms)
        state["messages"].append({k: v for k, v in message.items() if v is not None})
        calls = message.get("tool_calls") or []
        if calls:
            output = tool_output(mark, turn, options["output"]) if options.get("output") else f"{mark} result {turn}"
            new = [{"role": "tool", "tool_call_id": c["id"], "content": output} for c in calls]
            state["items"] = [
                {"type": "function_call_output", "call_id": c["id"], "output": f"{mark} result {turn}"} for c in calls
            ]
        else:
            new = [{"role": "user", "content": f"{mark} Go on ({turn})."}]
            state["items"] = new
        state["messages"] += new
        state["previous"] = tito.get("response")
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


async def drive(url: str, sessions: int, turns: int, deadline: float, decode, options: dict) -> dict:
    import httpx

    stats: dict = {"server": [], "client": [], "engine": [], "first": [], "errors": [], "done": [], "dropped": []}
    limits = httpx.Limits(max_connections=sessions + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as client:
        started = time.perf_counter()
        runs = [agent(client, url, i, turns, stats, options) for i in range(sessions)]
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
            record = response.json()
            problems += check(record, index, turns, decode)
            stats.setdefault("branched", 0)
            stats["branched"] += len(record.get("branches", [])) > 1
        stats["problems"] = problems
    return stats


async def long_sessions(url: str, count: int, turns: int, options: dict) -> dict:
    """``count`` long sessions one after another (every turn a tool call, long tool outputs); then each session's
    record read once, timed (its full check of the steps bridged without rendering the history)."""
    import httpx

    stats: dict = {"server": [], "client": [], "engine": [], "first": [], "errors": [], "done": [], "dropped": []}
    stats["sessions"], stats["records"] = [], []
    long_options = {**options, "output": options["long_output"], "tool_choice": "required"}
    async with httpx.AsyncClient(timeout=300, trust_env=False) as client:
        for index in range(count):
            one: dict = {key: [] for key in stats if isinstance(stats[key], list)}
            await agent(client, url, 900 + index, turns, one, long_options, prefix="long")
            stats["errors"] += one["errors"]
            stats["sessions"].append(one.get("by_turn", []))
            stats.setdefault("cpu", []).append(one.get("cpu_by_turn", []))
            started = time.perf_counter()
            response = await client.get(f"{url}/sessions/long-{900 + index:03d}")
            elapsed = (time.perf_counter() - started) * 1000
            record = response.json() if response.status_code == 200 else {}
            stats["records"].append((elapsed, record.get("check"), len(record.get("buffer", []))))
    return stats


def window(sessions: list[list[tuple[int, float, int]]], last: int, size: int = 5) -> tuple[float, float, int]:
    """The median over sessions of the gateway's ms per turn over turns ``last - size + 1 .. last``, the median of
    those turns' single values at ``last``, and the prompt's tokens there."""
    medians, at, tokens = [], [], []
    for turns in sessions:
        inside = [ms for turn, ms, _ in turns if last - size < turn <= last]
        if inside:
            medians.append(statistics.median(inside))
        at += [ms for turn, ms, _ in turns if turn == last]
        tokens += [count for turn, _, count in turns if turn == last]
    if not medians:
        return float("nan"), float("nan"), 0
    return statistics.median(medians), statistics.median(at), round(statistics.median(tokens)) if tokens else 0


async def uncontended(url: str, turns: int, options: dict) -> dict:
    """One session alone: the gateway's own cost per turn without queueing behind other sessions."""
    import httpx

    stats: dict = {"server": [], "client": [], "engine": [], "first": [], "errors": [], "done": [], "dropped": []}
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        await agent(client, url, 999, turns, stats, options, prefix="alone")
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct")
    parser.add_argument("--mirror", action="append", default=[])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=600.0, help="Seconds after which the run stops.")
    parser.add_argument("--store", action="store_true", help="Keep the sessions in a SQLite file (serve --store).")
    parser.add_argument("--dialect", choices=("chat", "responses", "messages"), default="chat")
    parser.add_argument("--stream", action="store_true", help="Stream every turn (as the engine samples).")
    parser.add_argument("--parser", default="template", help="The gateway's --parser (sglang streams incrementally).")
    parser.add_argument("--on-rewrite", default="refuse", help="The gateway's --on-rewrite.")
    parser.add_argument(
        "--rewrite-at", type=int, default=0, help="A turn at which each agent truncates an older tool output."
    )
    parser.add_argument("--bridge", default="auto", help="The gateway's --bridge.")
    parser.add_argument("--long-sessions", type=int, default=4, help="Long sessions, one at a time (0: none).")
    parser.add_argument("--long-turns", type=int, default=128, help="Turns of each long session.")
    parser.add_argument("--long-output", type=int, default=2400, help="Characters of each long session's tool outputs.")
    args = parser.parse_args()
    options = {
        "dialect": args.dialect,
        "stream": args.stream,
        "rewrite_at": args.rewrite_at,
        "long_output": args.long_output,
    }
    from tito_audit.model.load_by_id import load_by_id

    tokenizer = load_by_id(args.model, mirrors=[Path(m) for m in args.mirror], allow_hub=False).tokenizer

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids)

    port = free_port()
    command = [sys.executable, "-m", "tito_audit", "serve", args.model, "--engine", "fake", "--parser", args.parser]
    command += ["--on-rewrite", args.on_rewrite, "--bridge", args.bridge]
    folder = tempfile.TemporaryDirectory(prefix="bench-gateway-")  # removed when the script ends
    if args.store:
        command += ["--store", str(Path(folder.name) / "sessions.db")]
    command += ["--port", str(port), "--no-hub", "--max-sessions", str(max(args.sessions, 1) * 2)]
    for mirror in args.mirror:
        command += ["--mirror", mirror]
    log = open(os.environ["BENCH_SERVER_LOG"], "w") if os.environ.get("BENCH_SERVER_LOG") else subprocess.PIPE  # noqa: SIM115
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, text=True)
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
        stats = asyncio.run(drive(url, args.sessions, args.turns, args.deadline, decode, options))
        alone = asyncio.run(uncontended(url, args.turns, options))
        long = (
            asyncio.run(long_sessions(url, args.long_sessions, args.long_turns, options))
            if args.long_sessions
            else None
        )
        loaded_rss = rss_mib(server.pid)
        for index in range(args.sessions):
            httpx.delete(f"{url}/sessions/bench-{index:03d}", trust_env=False)
        httpx.delete(f"{url}/sessions/alone-999", trust_env=False)
        for index in range(args.long_sessions):
            httpx.delete(f"{url}/sessions/long-{900 + index:03d}", trust_env=False)
        emptied_rss = rss_mib(server.pid)
        health = httpx.get(f"{url}/healthz", trust_env=False).json()
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
    requests = len(stats["server"])
    mode = f"{args.dialect}{' streamed' if args.stream else ''}, parser {args.parser}, on-rewrite {args.on_rewrite}"
    mode += f" (rewrite at turn {args.rewrite_at})" if args.rewrite_at else ""
    mode += ", sessions in a SQLite file (--store)" if args.store else ""
    mode += f", bridge {args.bridge}"
    print(f"gateway bench: {args.model}, {args.sessions} sessions x {args.turns} turns, fake engine, loopback, {mode}")
    import tito_audit

    load = os.getloadavg()
    print(
        f"  code: {Path(tito_audit.__file__).parent}; {os.cpu_count()} CPUs; niceness {os.nice(0)}; load average at "
        f"the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (compare ratios on a loaded host, ms on a quiet one)"
    )
    print(
        f"  requests answered: {requests} of {args.sessions * args.turns} in {stats['seconds']:.1f} s "
        f"({requests / stats['seconds']:.1f} turns/s)"
    )
    print(f"  connections dropped mid-turn and the turn sent again: {len(stats['dropped'])}")
    if args.on_rewrite == "branch":
        print(f"  sessions with more than one branch: {stats.get('branched', 0)} of {args.sessions}")
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
        ("client: first event", stats["first"]),
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
    if long is not None:
        report_long(long, args)
    print(
        f"  server RSS: {idle_rss:.0f} MiB idle, {loaded_rss:.0f} MiB with {args.sessions} sessions, "
        f"{emptied_rss:.0f} MiB after deleting them (sessions left: {health['sessions']})"
    )
    long_errors = long["errors"] if long is not None else []
    return (
        0
        if not stats["errors"] + alone["errors"] + long_errors
        and not stats["problems"]
        and requests == args.sessions * args.turns
        else 1
    )


def report_long(long: dict, args: argparse.Namespace) -> None:
    """The long sessions' lines: the gateway's own ms per turn at turn 10 and at the last turn, and the records."""
    sessions, last = long["sessions"], args.long_turns
    early, early_at, early_tokens = window(sessions, 10)
    late, late_at, late_tokens = window(sessions, last)
    print(
        f"  long sessions: {len(sessions)} one at a time x {last} turns (tool outputs of {args.long_output} "
        f"characters, every turn a tool call); errors: {len(long['errors'])}"
    )
    for line in long["errors"][:5]:
        print("   ", line)
    print(
        f"  long sessions, gateway's own ms per turn (server-side, engine excluded; median of turns 6-10 and "
        f"{last - 4}-{last}, then the single turn): turn 10 ({early_tokens} prompt tokens) {early:.2f} ms "
        f"({early_at:.2f}); turn {last} ({late_tokens} tokens) {late:.2f} ms ({late_at:.2f}); "
        f"turn {last} / turn 10 = {late / early:.2f}x (bar 1.5x: {'PASS' if late <= 1.5 * early else 'FAIL'})"
    )
    cpu_early, _, _ = window(long.get("cpu", []), 10)
    cpu_late, _, _ = window(long.get("cpu", []), last)
    print(
        f"  long sessions, the same as CPU time of the gateway's work (gateway_cpu_ms: what it computed, not waiting "
        f"for a CPU; the figure to compare on a loaded host): turn 10 {cpu_early:.2f} ms, turn {last} {cpu_late:.2f} "
        f"ms = {cpu_late / cpu_early:.2f}x"
    )
    for number, turns in enumerate(sessions):
        values = {turn: ms for turn, ms, _ in turns}
        early_values = " ".join(f"{values[t]:.2f}" for t in range(6, 11) if t in values)
        late_values = " ".join(f"{values[t]:.2f}" for t in range(last - 4, last + 1) if t in values)
        print(f"    session {number}: turns 6-10: {early_values} ms; turns {last - 4}-{last}: {late_values} ms")
    for elapsed, check, tokens in long["records"]:
        if not check or not check.get("ran"):
            found = "no check ran"
        else:
            what = "nothing" if check.get("found") is None else ", ".join(check["found"]["causes"])
            found = f"checked {len(check['steps'])} steps, found {what}"
        print(f"  long session record ({tokens} tokens): read in {elapsed:.0f} ms, {found}")


if __name__ == "__main__":
    sys.exit(main())
