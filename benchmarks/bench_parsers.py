"""What each engine's parser does to each family's turns: per model with a documented parser pair of an engine, how
many tool steps come back exact (the next prompt, rendered from the parsed message, still continues the buffer) with
the template's own layout, and how many when the model writes its arguments as compact JSON.

Each model is audited with ``--parser auto`` (every engine whose parsers are installed, one line each; every
variant; the audit's own generated conversations), and the table reads the rollout with each parser: ``canonical`` =
tool-only steps that hold / tool-only steps, ``compact JSON`` = the written-layout rate (steps after a turn rewritten
with compact arguments whose next prompt continues the buffer / such steps). The perfect-inverse verdict and the
verdict with the parser are printed beside.

Run: ``make bench-parsers`` or ``python benchmarks/bench_parsers.py --mirror ../shared/tokenizers --mirror
../shared/templates`` (needs the sglang extra; see the README).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _print_row(model_id: str, variant, parse, totals: list[int]) -> list[int]:
    """One line per model, variant and engine; the totals with its counts added."""
    tool = next((row for row in parse.check.rows if row.category == "tool"), None)
    held, steps = (tool.passed, tool.cases) if tool is not None else (0, 0)
    compact = next((w for w in parse.written if w.layout == "compact JSON arguments"), None)
    kept, written = (compact.steps - compact.differing, compact.steps) if compact is not None else (0, 0)
    print(
        f"{model_id:48} {parse.parser:34} {variant.name[:28]:28} {held:>4}/{steps:<5} {kept:>6}/{written:<6}"
        f"  {variant.verdict} → {parse.verdict}"
    )
    return [totals[0] + held, totals[1] + steps, totals[2] + kept, totals[3] + written]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", action="append", default=[], help="a folder of <org>--<name>/ model folders")
    parser.add_argument("-n", "--count", type=int, default=48, help="generated conversations per variant")
    parser.add_argument("models", nargs="*", help="model ids (default: every registry model with a parser pair)")
    args = parser.parse_args()

    from tito_audit.audit.service import AuditOptions, audit
    from tito_audit.errors import AuditError
    from tito_audit.model.load_by_id import load_by_id
    from tito_audit.model.registry import registry_model_ids
    from tito_audit.parse.engines import recorded_engines

    models = args.models or [m for m in registry_model_ids() if recorded_engines(m)]
    print(f"{'model':48} {'parser':34} {'variant':28} {'canonical':>10} {'compact JSON':>13}  verdicts")
    totals = [0, 0, 0, 0]
    started = time.monotonic()
    for model_id in models:
        try:
            loaded = load_by_id(model_id, mirrors=[Path(m) for m in args.mirror], allow_hub=False)
        except AuditError:
            continue
        report = audit(loaded, AuditOptions(count=args.count, parser="auto"))
        for variant in report.variants:
            for parse in variant.parses:
                totals = _print_row(model_id, variant, parse, totals)
    print(
        f"all: canonical {totals[0]}/{totals[1]} tool steps exact; compact JSON {totals[2]}/{totals[3]} "
        f"({time.monotonic() - started:.0f}s)"
    )


if __name__ == "__main__":
    main()
