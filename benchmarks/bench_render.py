"""Cost of the render guard: the compiled templates of a few real models rendering every prefix of generated
conversations, guarded and not, in one process.

Three ways are timed on the same renders, interleaved round by round (best of ``--rounds``, CPU time of this
process, so that other work on the machine counts less):

- ``bare``: transformers' compiled template, no time limit, no clock;
- ``signal``: the same under a ``SIGALRM``/``setitimer`` limit per render (the way before the guard; main thread
  only, and it cancels the caller's own timers);
- ``guarded``: the template with :mod:`tito_audit.render_guard` installed, under its per-thread deadline and clock
  (what the audit does now).

Run: ``python benchmarks/bench_render.py --mirror ../shared/tokenizers``.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

DEFAULT_MODELS = ["Qwen/Qwen3-4B", "meta-llama/Llama-3.1-8B-Instruct", "openai/gpt-oss-20b"]
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

    from tito_audit.generate import generate
    from tito_audit.loading import load_by_id
    from tito_audit.render import DEFAULT_CLOCK
    from tito_audit.render_guard import clock, deadline, guard

    conversations = list(generate(args.count, 0))
    totals = {"bare": 0.0, "signal": 0.0, "guarded": 0.0}
    print(
        f"{'model':36s} {'renders':>7s} {'bare s':>8s} {'signal s':>8s} {'guarded s':>9s} {'vs bare':>8s} {'vs signal':>9s}"
    )
    for model_id in args.model or DEFAULT_MODELS:
        loaded = load_by_id(model_id, mirrors=args.mirror, allow_hub=False)
        bare = _cached_compile_jinja_template(loaded.template_source)
        guarded = _cached_compile_jinja_template(loaded.template_source)
        guard(guarded.environment)
        kwargs = _plain_template_data(dict(loaded.tokenizer.special_tokens_map))
        jobs = []
        for conversation in conversations:
            chat = _alias_reasoning_fields(
                _plain_template_data([{k: v for k, v in m.items() if v is not None} for m in conversation.messages])
            )
            tools = _plain_template_data(conversation.tools)
            for k in range(1, len(chat) + 1):
                for gp in (False, True):
                    jobs.append((chat[:k], tools, gp))

        def render(template: Any, chat: list, tools: Any, gp: bool) -> None:
            try:
                template.render(messages=chat, tools=tools, documents=None, add_generation_prompt=gp, **kwargs)
            except Exception:  # the template refuses this shape: the same work in every way timed
                pass

        def run(template: Any, limit: Callable[[float], Any] | None, with_clock: bool) -> float:
            started = time.process_time()
            for chat, tools, gp in jobs:
                if limit is None:
                    render(template, chat, tools, gp)
                elif with_clock:
                    with limit(LIMIT), clock(DEFAULT_CLOCK):
                        render(template, chat, tools, gp)
                else:
                    with limit(LIMIT):
                        render(template, chat, tools, gp)
            return time.process_time() - started

        best = {"bare": float("inf"), "signal": float("inf"), "guarded": float("inf")}
        for _ in range(args.rounds):
            best["bare"] = min(best["bare"], run(bare, None, False))
            best["signal"] = min(best["signal"], run(bare, signal_deadline, False))
            best["guarded"] = min(best["guarded"], run(guarded, deadline, True))
        for way in totals:
            totals[way] += best[way]
        print(
            f"{model_id:36s} {len(jobs):7d} {best['bare']:8.3f} {best['signal']:8.3f} {best['guarded']:9.3f} "
            f"{(best['guarded'] / best['bare'] - 1) * 100:+7.1f}% {(best['guarded'] / best['signal'] - 1) * 100:+8.1f}%"
        )
    print(
        f"{'total':36s} {'':7s} {totals['bare']:8.3f} {totals['signal']:8.3f} {totals['guarded']:9.3f} "
        f"{(totals['guarded'] / totals['bare'] - 1) * 100:+7.1f}% {(totals['guarded'] / totals['signal'] - 1) * 100:+8.1f}%"
    )


if __name__ == "__main__":
    main()
