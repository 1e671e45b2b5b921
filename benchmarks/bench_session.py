"""Per-turn cost of ``TitoSession.extend`` in each bridge mode, against the floor and a full re-render, at 10 to 128
turns and on one trajectory of about 100,000 tokens.

Trajectories are tool loops built from the SWE-agent and tau-bench tool steps in ../shared/conversations (each
repetition of a step is made unique, so that no cache sees the same tool output twice); the long one is the 128-turn
loop with every tool output repeated until the conversation holds about ``--long-tokens`` tokens. Completions are
what an engine returns (the template's text of each turn after its prompt, tokenized by the tokenizer alone, cut after
the first stop token), computed with transformers outside the timings.

Per model, length and mode (``template``: the whole conversation rendered at every step; ``auto``: steps the
template's proof covers bridged from a short local render, the whole conversation rendered at ``finish``;
``history-free``: the stand-in suffix, never checked) it prints the mean ms per turn of the first session of that mode
in the process (cold: ``auto``'s includes the template's proof, also printed apart), of the best later session
(warm), the warm session's last turn, and the warm session's total per rollout (start, every extend, finish: for
``auto`` that is where the one full render is). Beside them: the floor, tokenizing each step's new text alone (the
bridge the template writes for the appended messages, with the tokenizer itself, nothing cached), per turn and in
total, and one full render (``apply_chat_template(..., tokenize=True)`` of the whole conversation before its last
turn, what a re-rendering trainer pays at that turn).

The closing lines check the issue's bars on the ``auto`` mode: warm ms per turn at 128 turns within 1.5x of its value
at 10 and under 3 ms where the model's bridge is proved history-free (the others say why), and the total per 128-turn
rollout within 2x of the floor plus one full render. They also print what a re-measurement needs: the host's load,
this process's niceness, the versions and the commit.

Run: ``make bench-session`` or ``python benchmarks/bench_session.py --mirror ../shared/tokenizers``
(``--model`` repeatable, ``--lengths 10,30``, ``--modes auto,template``, ``--long-tokens 0`` to leave out the long one).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import itertools
import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = Path(__file__).resolve().parent.parent
CONVERSATIONS = ROOT.parent / "shared" / "conversations"
DEFAULT_MODELS = [
    "Qwen/Qwen3-4B-Instruct-2507",
    "meta-llama/Llama-3.1-8B-Instruct",
    "openai/gpt-oss-20b",
    "Qwen/Qwen3.5-0.8B",
    "Qwen/Qwen3.6-35B-A3B",
]
LENGTHS = (10, 30, 60, 128)
MODES = ("template", "auto", "history-free")
LONG = "long"


def trajectory(turns: int, salt: str, repeat: int = 1) -> tuple[list[dict], list[dict] | None]:
    """A tool loop of ``turns`` assistant turns: the SWE-agent task's opening, then its tool steps and
    tau-bench's, cycled, each copy marked so that its text is new (its tool output ``repeat`` times); the last turn
    answers."""
    from tito_audit.conversations.datasources import load_conversations

    swe = load_conversations(str(CONVERSATIONS / "swe-agent" / "marshmallow-1867__function_calling.traj"))
    tau = load_conversations(str(CONVERSATIONS / "tau-bench" / "gpt-4o-airline.json"), limit=6)
    base = swe.conversations[0]
    opening = base.messages[: base.assistant_indices()[0]]
    steps: list[list[dict]] = []
    for conversation in [base, *tau.conversations]:
        messages, indices = conversation.messages, conversation.assistant_indices()
        for a, b in itertools.pairwise(indices):
            between = messages[a + 1 : b]
            if messages[a].get("tool_calls") and between and all(m["role"] == "tool" for m in between):
                steps.append(messages[a:b])
    messages = [dict(m) for m in opening]
    for n in range(turns - 1):
        step = steps[n % len(steps)]
        copy = [dict(m) for m in step]
        copy[0]["tool_calls"] = [with_object_arguments(c) for c in copy[0]["tool_calls"]]
        for message in copy[1:]:
            text = message.get("content") or ""
            message["content"] = "\n".join([text] * repeat) + f"\n(run {salt}.{n})"
        messages += copy
    messages.append({"role": "assistant", "content": "The fix is in place and the tests pass."})
    CYCLE[0] = len(steps)
    return messages, base.tools


CYCLE = [0]
"""How many distinct tool steps a trajectory cycles through (step n and step n + CYCLE[0] append the same text, but for
the mark that makes it new)."""


def with_object_arguments(call: dict) -> dict:
    """A tool call whose JSON-string arguments are an object (Qwen3.5/3.6's templates iterate over them)."""
    function = dict(call["function"])
    if isinstance(function.get("arguments"), str):
        try:
            function["arguments"] = json.loads(function["arguments"])
        except ValueError:
            function["arguments"] = {"input": function["arguments"]}
    return {**call, "function": function}


@dataclass
class Rollout:
    """One trajectory with what the engine returns for each turn and the text each step appends."""

    messages: list[dict]
    tools: list[dict] | None
    completions: dict[int, list[int]]
    bridges: list[str] = field(default_factory=list)
    """The template's text for each step's new messages (after the completion's stop token)."""
    tokens: int = 0

    @property
    def turns(self) -> list[int]:
        return [j for j, m in enumerate(self.messages) if m["role"] == "assistant"]


def rollout_for(tokenizer, template, messages: list[dict], tools, stop_ids) -> Rollout:
    """The completions (the template's text of each turn after its prompt, cut after the first stop token) and each
    step's new text, computed with transformers alone, once, outside the timings."""

    def text(upto: int, gp: bool) -> str:
        return tokenizer.apply_chat_template(
            messages[:upto], tools=tools, chat_template=template, add_generation_prompt=gp, tokenize=False
        )

    rollout = Rollout(messages, tools, {})
    turns = rollout.turns
    prompts = {j: text(j, True) for j in turns}
    for n, j in enumerate(turns):
        full = text(j + 1, False)
        ids = tokenizer.encode(full[len(prompts[j]) :], add_special_tokens=False)
        cut = next((k + 1 for k, t in enumerate(ids) if t in stop_ids), len(ids))
        rollout.completions[j] = ids[:cut]
        if n + 1 < len(turns):
            sampled = prompts[j] + tokenizer.decode(ids[:cut])
            following = prompts[turns[n + 1]]
            rollout.bridges.append(following[len(sampled) :] if following.startswith(sampled) else following)
    rollout.tokens = len(tokenizer.encode(prompts[turns[-1]], add_special_tokens=False))
    return rollout


@dataclass
class Timing:
    start: float
    turns: list[float]
    finish: float
    bridged: dict[str, int]

    @property
    def total(self) -> float:
        return self.start + sum(self.turns) + self.finish


def time_session(open_session, mode: str, rollout: Rollout) -> Timing:
    session = open_session(rollout.tools, mode)
    messages, turns = rollout.messages, rollout.turns
    started = time.perf_counter()
    session.start(messages[: turns[0]])
    opened = time.perf_counter() - started
    costs = []
    for n, j in enumerate(turns[:-1]):
        started = time.perf_counter()
        session.extend(rollout.completions[j], messages[j], messages[j + 1 : turns[n + 1]])
        costs.append(time.perf_counter() - started)
    last = turns[-1]
    started = time.perf_counter()
    session.finish(rollout.completions[last], messages[last])
    finished = time.perf_counter() - started
    assert not session.breaks, session.breaks[0].describe()
    bridged: dict[str, int] = {}
    for turn in session.turns[:-1]:
        how = getattr(turn, "bridged", mode)  # (earlier versions of the session have no such field)
        bridged[how] = bridged.get(how, 0) + 1
    return Timing(opened, costs, finished, bridged)


def floor_of(tokenizer, rollout: Rollout) -> list[float]:
    """Seconds to tokenize each step's new text alone with the tokenizer itself (best of 3; nothing cached)."""
    rust = tokenizer._tokenizer
    costs = []
    for text in rollout.bridges:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            rust.encode(text, add_special_tokens=False)
            best = min(best, time.perf_counter() - started)
        costs.append(best)
    return costs


def full_render(tokenizer, template, rollout: Rollout) -> float:
    """Seconds for one ``apply_chat_template(..., tokenize=True)`` of the conversation before its last turn (best of
    2)."""
    last = rollout.turns[-1]
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        tokenizer.apply_chat_template(
            rollout.messages[:last],
            tools=rollout.tools,
            chat_template=template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        best = min(best, time.perf_counter() - started)
    return best


def environment() -> list[str]:
    """What a re-measurement needs to compare with: the host, its load, this process's niceness, the versions."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = "?"
    versions = []
    for name in ("tito-audit", "transformers", "tokenizers", "jinja2"):
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    load = os.getloadavg()
    import tito_audit

    return [
        f"code: {Path(tito_audit.__file__).parent}",
        f"host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; commit {commit}",
        f"versions: {', '.join(versions)}",
        f"niceness of this process: {os.nice(0)}; load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        "(ratios are what to compare on a loaded host; absolute ms on a quiet one)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", action="append", default=[], help="Folder of <org>--<name>/ model folders.")
    parser.add_argument("--model", action="append", default=[], help=f"Model ids (default: {DEFAULT_MODELS}).")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="Assistant turns per trajectory.")
    parser.add_argument("--modes", default=",".join(MODES), help="Bridge modes to time.")
    parser.add_argument("--long-tokens", type=int, default=100_000, help="Tokens of the long trajectory (0: none).")
    parser.add_argument("--runs", type=int, default=3, help="Sessions per length and mode (the first is cold).")
    args = parser.parse_args()
    from tito_audit import TitoSession

    lengths: list[int | str] = [int(n) for n in args.lengths.split(",") if n]
    if args.long_tokens:
        lengths.append(LONG)
    modes = [m for m in args.modes.split(",") if m]
    for line in environment():
        print(line)
    verdicts: list[str] = []
    for model in args.model or DEFAULT_MODELS:
        started = time.perf_counter()
        guard = TitoSession.from_model(model, mirrors=args.mirror, allow_hub=False)
        loaded = time.perf_counter() - started
        tokenizer, template = guard.tokenizer, guard.chat_template

        def open_session(tools, mode, model=model, clock=guard.clock):  # from_model loads the model once
            return TitoSession.from_model(
                model, tools=tools, mirrors=args.mirror, allow_hub=False, bridge=mode, clock=clock
            )

        started = time.perf_counter()
        # the proof for the trajectories' setting (their tools, or none: the SWE-agent trajectory declares none)
        proof = getattr(open_session(trajectory(2, "proof")[1], "template"), "bridge_proof", None)
        proved = time.perf_counter() - started
        print(f"\n{model} (loaded in {loaded:.2f} s; the proof took {proved:.2f} s)")
        print(f"  proof: {proof.describe() if proof is not None else 'none (this version has no bridge auto)'}")
        header = (
            f"{'turns':>5} {'tokens':>7} {'mode':>12} | {'cold':>7} {'warm':>7} {'last':>7} | "
            f"{'total ms':>9} | {'floor/turn':>10} {'floor tot':>9} {'full render':>11} | bridged"
        )
        print(header)
        results: dict[tuple, tuple[Timing, float, float]] = {}
        for length in lengths:
            turns = 128 if length == LONG else int(length)
            repeat = 1
            if length == LONG:  # tool outputs repeated until the conversation holds about --long-tokens tokens
                probe = rollout_for(tokenizer, template, *trajectory(turns, "probe"), guard.stop_ids)
                repeat = max(1, round(args.long_tokens / max(probe.tokens, 1)))
                while repeat > 1 and probe.tokens * repeat > args.long_tokens * 1.4:
                    repeat -= 1
            rollouts = []
            for attempt in range(len(modes) * args.runs):
                messages, tools = trajectory(turns, f"{length}-{attempt}", repeat)
                rollouts.append(rollout_for(tokenizer, template, messages, tools, guard.stop_ids))
            floor = floor_of(tokenizer, rollouts[0])
            full = full_render(tokenizer, template, rollouts[0])
            for index, mode in enumerate(modes):
                mine = rollouts[index * args.runs : (index + 1) * args.runs]
                timings = [time_session(open_session, mode, rollout) for rollout in mine]
                cold = timings[0] if length == lengths[0] else None
                warm = min(timings[1:] or timings, key=lambda t: t.total)
                results[(length, mode)] = (warm, sum(floor), full)
                bridged = ", ".join(f"{k} {v}" for k, v in sorted(warm.bridged.items()))
                cold_text = f"{statistics.mean(cold.turns) * 1e3:>7.2f}" if cold else f"{'-':>7}"
                print(
                    f"{length:>5} {mine[0].tokens:>7} {mode:>12} | {cold_text} "
                    f"{statistics.mean(warm.turns) * 1e3:>7.2f} {warm.turns[-1] * 1e3:>7.2f} | "
                    f"{warm.total * 1e3:>9.1f} | {statistics.mean(floor) * 1e3:>10.3f} {sum(floor) * 1e3:>9.1f} "
                    f"{full * 1e3:>11.1f} | {bridged}"
                )
        verdicts += bars(model, proof, results)
    print("\nThe issue's bars (bridge auto):")
    for line in verdicts:
        print(line)


def bars(model: str, proof, results: dict) -> list[str]:
    """The issue's bars for one model, as lines that say PASS or FAIL (or why they do not apply), and how one step's
    cost grows with the history in each mode (the same steps early and late)."""
    out = []
    for (length, mode), (warm, _, _) in sorted(results.items(), key=str):
        same = same_steps(warm.turns) if length in (128, LONG) else None
        if same is not None:
            name = "128 turns" if length == 128 else "the long trajectory"
            out.append(
                f"  {model}, {name}, {mode}: the same steps early and late (the first cycle of {CYCLE[0]} steps, the "
                f"last whole one): {same[0]:.2f} vs {same[1]:.2f} ms per turn = {same[1] / same[0]:.2f}x"
            )
    for length in (128, LONG):
        if (length, "auto") not in results or (10, "auto") not in results:
            continue
        warm, floor, full = results[(length, "auto")]
        ten = results[(10, "auto")][0]
        local = warm.bridged.get("local", 0)
        steps = sum(warm.bridged.values())
        per_turn, per_turn_ten = statistics.mean(warm.turns) * 1e3, statistics.mean(ten.turns) * 1e3
        budget = 2 * (floor + full)
        total = "PASS" if warm.total <= budget else "FAIL"
        within = (
            f"total {warm.total * 1e3:.1f} ms vs 2 x (floor {floor * 1e3:.1f} + full render {full * 1e3:.1f}) = "
            f"{budget * 1e3:.1f} ms ({warm.total / budget:.2f} of it): {total}"
        )
        name = "128 turns" if length == 128 else "the long trajectory"
        if local < steps:
            why = (
                proof.describe()
                if proof is None or not proof.covered
                else f"{steps - local} of {steps} steps outside the proof"
            )
            out.append(f"  {model}, {name}: bridge not history-free for every step ({why}): per turn {per_turn:.2f} ms")
            continue
        if length == LONG:  # its tool outputs are repeated: its steps hold more new text than the 10-turn ones
            out.append(
                f"  {model}, {name}: warm {per_turn:.2f} ms/turn ({statistics.mean(warm.turns) / (floor / steps):.1f}x "
                f"its floor per turn; its steps hold more new text than the 10-turn ones, see the same steps above); "
                + within
            )
            continue
        ratio = per_turn / per_turn_ten
        flat = "PASS" if ratio <= 1.5 and per_turn < 3 else "FAIL"
        out.append(
            f"  {model}, {name}: warm {per_turn:.2f} ms/turn vs {per_turn_ten:.2f} at 10 turns = {ratio:.2f}x "
            f"(bar 1.5x, 3 ms): {flat}; " + within
        )
    return out


def same_steps(turns: list[float]) -> tuple[float, float] | None:
    """Mean ms per turn over the trajectory's first cycle of steps and over its last whole cycle (the same steps, with
    the whole conversation before them): how the cost of one step grows with the history, whatever the steps hold."""
    cycle = CYCLE[0]
    if not cycle or len(turns) < 2 * cycle:
        return None
    last = (len(turns) // cycle - 1) * cycle
    return statistics.mean(turns[:cycle]) * 1e3, statistics.mean(turns[last : last + cycle]) * 1e3


if __name__ == "__main__":
    main()
