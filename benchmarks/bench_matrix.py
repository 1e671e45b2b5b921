"""Speed and memory of the audit against a naive reference and against the floor, per model and in total.

For each model (default: every complete folder of the mirror), in its own process so that its peak
memory is its own:

- **tool**: ``audit()`` at default settings (every variant), wall time and conversations per second;
- **naive**: the same checks on the same conversations and variants, re-rendering and re-tokenizing
  every prefix with ``apply_chat_template(..., tokenize=True)`` for each check, without any caching;
- **floor**: rendering and tokenizing each distinct prefix once, nothing else.

Prints a table and the totals. Run: ``python benchmarks/bench_matrix.py --mirror ../shared/tokenizers``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _render(tokenizer, template, messages, tools, gp, tokenize, kwargs):
    try:
        out = tokenizer.apply_chat_template(
            messages,
            tools=tools,
            chat_template=template,
            add_generation_prompt=gp,
            tokenize=tokenize,
            return_dict=False,
            **kwargs,
        )
    except Exception:
        return None
    return list(out) if tokenize else out


def naive_reference(model, conversations, variants) -> int:
    """Each check renders and tokenizes, through apply_chat_template, every prefix it needs; nothing is
    shared between checks or cached. Returns the number of apply_chat_template calls."""
    tokenizer, template = model.tokenizer, model.template_source
    calls = 0

    def both(messages, tools, gp, kwargs):
        nonlocal calls
        calls += 2
        return _render(tokenizer, template, messages, tools, gp, False, kwargs), _render(
            tokenizer, template, messages, tools, gp, True, kwargs
        )

    def completion(messages, tools, j, kwargs):
        prompt, full = both(messages[:j], tools, True, kwargs), both(messages[: j + 1], tools, False, kwargs)
        if prompt[0] is None or full[0] is None:
            return None, None
        generated = full[0][len(prompt[0]) :]
        return prompt[0] + generated, tokenizer.encode(generated, add_special_tokens=False)

    for variant in variants:
        kwargs = dict(variant.kwargs)
        for conversation in conversations:
            messages, tools = conversation.messages, conversation.tools
            turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
            steps = list(itertools.pairwise(turns))
            # 1. roundtrip: each sampled completion, decoded and encoded again
            for j in turns:
                _, ids = completion(messages, tools, j, kwargs)
                if ids is not None:
                    _ = tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False) == ids
            # 2. append: each appended message, text and tokens
            for k in range(1, len(messages)):
                before, after = both(messages[:k], tools, False, kwargs), both(messages[: k + 1], tools, False, kwargs)
                _ = before[0] is not None and after[0] is not None and after[0].startswith(before[0])
            # 3. rollout: text stability, seam stability and drift, each with its own renders
            for j, nxt in steps:
                for _check in ("text", "seam", "drift"):
                    buffer_text, ids = completion(messages, tools, j, kwargs)
                    text, _ids = both(messages[:nxt], tools, True, kwargs)
                    if buffer_text is not None and text is not None:
                        _ = text.startswith(buffer_text) and tokenizer.encode(buffer_text, add_special_tokens=False)
            # 4. bridge: the real bridge against a stand-in's suffix, for tool-only steps
            for j, nxt in steps:
                if not all(m["role"] == "tool" for m in messages[j + 1 : nxt]):
                    continue
                completion(messages, tools, j, kwargs)
                both(messages[:nxt], tools, True, kwargs)
                stand_in = [{"role": "user", "content": "Use the tools."}, messages[j]]
                both(stand_in[:1], tools, True, kwargs)
                both(stand_in, tools, False, kwargs)
                both(stand_in + list(messages[j + 1 : nxt]), tools, True, kwargs)
    return calls


def floor(model, conversations, variants) -> int:
    """Render and tokenize each distinct prefix once."""
    tokenizer, template = model.tokenizer, model.template_source
    count = 0
    for variant in variants:
        for conversation in conversations:
            messages = conversation.messages
            keys = {(k, False) for k in range(1, len(messages) + 1)}
            keys |= {(j, True) for j, m in enumerate(messages) if m["role"] == "assistant"}
            for k, gp in sorted(keys):
                text = _render(tokenizer, template, messages[:k], conversation.tools, gp, False, dict(variant.kwargs))
                if text is not None:
                    tokenizer(text, add_special_tokens=False)
                    count += 1
    return count


def best_of(repeat: int, function):
    """Smallest wall time of ``repeat`` runs (timings below a second are noisy) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


def measure(model_id: str, mirrors: list[str], count: int, seed: int, repeat: int, result_queue) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tito_audit.audit.service import AuditOptions, audit
    from tito_audit.conversations.generate import generate
    from tito_audit.model.load_folder import JINJA, load_model
    from tito_audit.model.resolve import resolve_model
    from tito_audit.model.variants import template_inputs, variants_for

    model = load_model(resolve_model(model_id, mirrors=[Path(m) for m in mirrors], allow_hub=False))
    tool, report = best_of(repeat, lambda: audit(model, AuditOptions(count=count, seed=seed)))
    figures = {"model": model_id, "variants": len(report.variants), "conversations": count, "tool_s": tool}
    if model.backend == JINJA:
        variants = variants_for(template_inputs(model.template_source))
        # the references start from the seed too: generating the conversations is part of their time
        figures["naive_s"], figures["naive_calls"] = best_of(
            repeat, lambda: naive_reference(model, list(generate(count, seed)), variants)
        )
        figures["floor_s"], figures["floor_renders"] = best_of(
            repeat, lambda: floor(model, list(generate(count, seed)), variants)
        )
    figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result_queue.put(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--mirror", action="append", default=[])
    parser.add_argument("--count", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest counts")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    models = args.models
    if not models:
        for mirror in args.mirror:
            for folder in sorted(Path(mirror).iterdir()):
                provenance = folder / "PROVENANCE.json"
                if provenance.is_file() and json.loads(provenance.read_text()).get("complete", True):
                    models.append(folder.name.replace("--", "/", 1))
    context = multiprocessing.get_context("spawn")
    rows = []
    header = (
        f"{'model':45s} {'var':>3s} {'tool s':>7s} {'conv/s':>7s} {'naive s':>8s} {'x naive':>7s} "
        f"{'floor s':>7s} {'/floor':>6s} {'peak MB':>8s}"
    )
    print(header)
    print("-" * len(header))
    for model_id in models:
        results = context.Queue()
        process = context.Process(
            target=measure, args=(model_id, args.mirror, args.count, args.seed, args.repeat, results)
        )
        process.start()
        figures = results.get()
        process.join()
        rows.append(figures)
        rate = figures["conversations"] * figures["variants"] / figures["tool_s"]
        naive = figures.get("naive_s")
        floor_s = figures.get("floor_s")
        print(
            f"{model_id:45s} {figures['variants']:3d} {figures['tool_s']:7.2f} {rate:7.1f} "
            + (
                f"{naive:8.2f} {naive / figures['tool_s']:7.1f} {floor_s:7.2f} {figures['tool_s'] / floor_s:6.2f} "
                if naive
                else f"{'-':>8s} {'-':>7s} {'-':>7s} {'-':>6s} "
            )
            + f"{figures['peak_rss_mb']:8.0f}"
        )
    tool = sum(r["tool_s"] for r in rows)
    naive = sum(r.get("naive_s", 0) for r in rows)
    floor_total = sum(r.get("floor_s", 0) for r in rows)
    jinja_tool = sum(r["tool_s"] for r in rows if "naive_s" in r)
    conversations = sum(r["conversations"] * r["variants"] for r in rows)
    print("-" * len(header))
    print(
        f"{'total':45s} {'':3s} {tool:7.2f} {conversations / tool:7.1f} {naive:8.2f} {naive / jinja_tool:7.1f} "
        f"{floor_total:7.2f} {jinja_tool / floor_total:6.2f} {max(r['peak_rss_mb'] for r in rows):8.0f}"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
