"""Per-turn cost of ``TitoSession.extend`` against a full re-render + re-tokenize of the conversation.

A trainer that re-renders calls ``apply_chat_template(messages, tools=..., add_generation_prompt=True,
tokenize=True)`` before every generation; a TITO loop calls ``session.extend(...)``, which renders the next
prompt's text, tokenizes it (pieces between added tokens are cached), checks text and seam stability and
appends the bridge. Both are timed turn by turn on the same trajectories of 10, 30 and 60 assistant turns, built
from the SWE-agent and tau-bench tool steps in ../shared/conversations (each repetition of a step is made
unique, so that no cache sees the same tool output twice).

"cold" is the first session of the process (a model's first renders are also checked against transformers' own
renderer); "warm" is a later session on the same model, as in a training run that opens one session per
rollout. Every timed session gets a trajectory of its own (new tool output text), so the tokenization cache
only ever sees again what a real rollout repeats: the system prompt, the tool schemas, the template's own text.

Prints one table per model. Run: ``make bench-session`` or
``python benchmarks/bench_session.py --mirror ../shared/tokenizers``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = Path(__file__).resolve().parent.parent
CONVERSATIONS = ROOT.parent / "shared" / "conversations"
DEFAULT_MODELS = ["Qwen/Qwen3-4B-Instruct-2507", "meta-llama/Llama-3.1-8B-Instruct", "openai/gpt-oss-20b"]
LENGTHS = (10, 30, 60)


def trajectory(turns: int, salt: str) -> tuple[list[dict], list[dict] | None]:
    """A tool loop of ``turns`` assistant turns: the SWE-agent task's opening, then its tool steps and
    tau-bench's, cycled, each copy marked so that its text is new; the last turn answers."""
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
        for message in copy[1:]:
            message["content"] = f"{message.get('content') or ''}\n(run {salt}.{n})"
        messages += copy
    messages.append({"role": "assistant", "content": "The fix is in place and the tests pass."})
    return messages, base.tools


def completions_for(tokenizer, template, messages: list[dict], tools, stop_ids) -> dict[int, list[int]]:
    """What an engine returns for each assistant turn: the template's text of the turn after its prompt, cut
    after the first stop token (computed with transformers alone, once, outside the timings)."""
    out = {}

    def text(upto: int, gp: bool) -> str:
        return tokenizer.apply_chat_template(
            messages[:upto], tools=tools, chat_template=template, add_generation_prompt=gp, tokenize=False
        )

    for j in (j for j, m in enumerate(messages) if m["role"] == "assistant"):
        prompt, full = text(j, True), text(j + 1, False)
        ids = tokenizer.encode(full[len(prompt) :], add_special_tokens=False)
        cut = next((n + 1 for n, t in enumerate(ids) if t in stop_ids), len(ids))
        out[j] = ids[:cut]
    return out


def time_session(guard, messages, tools, completions) -> list[float]:
    session = guard.spawn(tools=tools)
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    session.start(messages[: turns[0]])
    costs = []
    for n, j in enumerate(turns[:-1]):
        started = time.perf_counter()
        session.extend(completions[j], messages[j], messages[j + 1 : turns[n + 1]])
        costs.append(time.perf_counter() - started)
    assert not session.breaks
    return costs


def time_rerender(tokenizer, template, messages, tools, kwargs) -> list[float]:
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    costs = []
    for j in turns[1:]:
        started = time.perf_counter()
        tokenizer.apply_chat_template(
            messages[:j],
            tools=tools,
            chat_template=template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            **kwargs,
        )
        costs.append(time.perf_counter() - started)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", action="append", default=[], help="Folder of <org>--<name>/ model folders.")
    parser.add_argument("--model", action="append", default=[], help=f"Model ids (default: {DEFAULT_MODELS}).")
    args = parser.parse_args()
    from tito_audit import TitoSession

    for model in args.model or DEFAULT_MODELS:
        started = time.perf_counter()
        guard = TitoSession.from_model(model, mirrors=args.mirror, allow_hub=False)
        loaded = time.perf_counter() - started
        tokenizer, template = guard.tokenizer, guard.chat_template
        print(f"\n{model} (loaded in {loaded:.2f} s; later from_model calls reuse it)")
        print(
            f"{'turns':>5} {'tokens':>7} | {'re-render ms/turn':>17} {'last':>7} | "
            f"{'extend cold':>11} {'warm':>7} {'last':>7} | {'warm vs re-render':>17}"
        )
        cold_done = False
        for length in LENGTHS:
            runs = []
            for attempt in range(4):
                messages, tools = trajectory(length, f"{length}-{attempt}")
                completions = completions_for(tokenizer, template, messages, tools, guard.stop_ids)
                runs.append((messages, tools, completions))
            if not cold_done:
                cold = time_session(guard, *runs[0])
                cold_done = True
            else:
                cold = None
            warm = min((time_session(guard, *run) for run in runs[1:]), key=sum)
            rerender = min((time_rerender(tokenizer, template, m, t, {}) for m, t, _ in runs[1:]), key=sum)
            messages, tools, _ = runs[-1]
            tokens = len(
                tokenizer.apply_chat_template(
                    messages, tools=tools, chat_template=template, tokenize=True, return_dict=False
                )
            )
            mean_rerender, mean_warm = statistics.mean(rerender) * 1e3, statistics.mean(warm) * 1e3
            cold_text = f"{statistics.mean(cold) * 1e3:>11.2f}" if cold else f"{'-':>11}"
            print(
                f"{length:>5} {tokens:>7} | {mean_rerender:>17.2f} {rerender[-1] * 1e3:>7.2f} | "
                f"{cold_text} {mean_warm:>7.2f} {warm[-1] * 1e3:>7.2f} | {mean_warm / mean_rerender:>16.2f}×"
            )


if __name__ == "__main__":
    main()
