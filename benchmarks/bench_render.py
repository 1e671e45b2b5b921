"""Cost of the render guard: the compiled templates of a few real models rendering every prefix of generated
conversations, guarded and not, in one process.

Three ways are timed on the same renders, interleaved round by round (best of ``--rounds``, CPU time of this
process, so that other work on the machine counts less):

- ``bare``: transformers' compiled template, no time limit, no clock;
- ``signal``: the same under a ``SIGALRM``/``setitimer`` limit per render (the way before the guard; main thread
  only, and it cancels the caller's own timers);
- ``guarded``: the template with :mod:`tito_audit.model.render_guard` installed, under its per-thread deadline, bounds
  (the audit's default ``RenderLimits``: time, characters, bytes) and clock (what the audit does now).

Run: ``python benchmarks/bench_render.py --mirror ../shared/tokenizers``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

DEFAULT_MODELS = ["Qwen/Qwen3-4B", "meta-llama/Llama-3.1-8B-Instruct", "openai/gpt-oss-20b", "google/gemma-4-E2B-it"]
LIMIT = 10.0


@contextmanager
def signal_deadline(seconds: float) -> Iterator[None]:
    """The limit as it was: SIGALRM after ``seconds``."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def timed(jobs: list, template: Any, kwargs: dict, limit: Callable[[float], Any] | None, pinned: Any) -> float:
    """CPU seconds to render every job (``pinned``: a clock context entered once, as an audit does per variant)."""
    started = time.process_time()
    with pinned:
        for chat, tools, gp in jobs:
            with limit(LIMIT) if limit is not None else contextlib.nullcontext(), contextlib.suppress(Exception):
                # a refused shape costs the same in every way timed
                template.render(messages=chat, tools=tools, documents=None, add_generation_prompt=gp, **kwargs)
    return time.process_time() - started


def percent(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", action="append", default=[])
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--count", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    from transformers.utils.chat_template_utils import (
        _alias_reasoning_fields,
        _cached_compile_jinja_template,
        _plain_template_data,
    )

    from tito_audit.conversations.generate import generate
    from tito_audit.model.load_by_id import load_by_id
    from tito_audit.model.render import DEFAULT_CLOCK
    from tito_audit.model.render_guard import RenderLimits, clock, deadline, guard
    from tito_audit.model.render_sizes import as_input

    def bounded(seconds: float) -> deadline:
        return deadline.of(RenderLimits(max_seconds=seconds))

    conversations = list(generate(args.count, 0))
    ways = ("bare", "signal", "guarded")
    totals = dict.fromkeys(ways, 0.0)
    print(f"{'model':36s} {'renders':>7s} " + " ".join(f"{w + ' s':>9s}" for w in ways) + "   vs bare  vs signal")
    for model_id in args.model or DEFAULT_MODELS:
        loaded = load_by_id(model_id, mirrors=args.mirror, allow_hub=False)
        bare = _cached_compile_jinja_template(loaded.template_source)
        guarded = _cached_compile_jinja_template(loaded.template_source)
        guard(guarded, loaded.template_source)
        kwargs = _plain_template_data(dict(loaded.tokenizer.special_tokens_map))
        jobs = []
        for conversation in conversations:
            # prepared once per conversation and marked as the render's input, as the audit's renderer does
            chat = as_input(
                _alias_reasoning_fields(
                    _plain_template_data([{k: v for k, v in m.items() if v is not None} for m in conversation.messages])
                )
            )
            tools = as_input(_plain_template_data(conversation.tools))
            jobs += [(chat[:k], tools, gp) for k in range(1, len(chat) + 1) for gp in (False, True)]
        best = dict.fromkeys(ways, float("inf"))
        for _ in range(args.rounds):  # interleaved, so that a busy moment of the machine hits every way
            best["bare"] = min(best["bare"], timed(jobs, bare, kwargs, None, contextlib.nullcontext()))
            best["signal"] = min(best["signal"], timed(jobs, bare, kwargs, signal_deadline, contextlib.nullcontext()))
            best["guarded"] = min(best["guarded"], timed(jobs, guarded, kwargs, bounded, clock(DEFAULT_CLOCK)))
        for way in ways:
            totals[way] += best[way]
        figures = " ".join(f"{best[w]:9.3f}" for w in ways)
        print(
            f"{model_id:36s} {len(jobs):7d} {figures} {percent(best['guarded'], best['bare']):>9s} "
            f"{percent(best['guarded'], best['signal']):>9s}"
        )
    figures = " ".join(f"{totals[w]:9.3f}" for w in ways)
    print(
        f"{'total':36s} {'':7s} {figures} {percent(totals['guarded'], totals['bare']):>9s} "
        f"{percent(totals['guarded'], totals['signal']):>9s}"
    )


if __name__ == "__main__":
    main()
