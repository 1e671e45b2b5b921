"""The audit a user waits for, end to end, beside a naive reference and the floor, per model; then the matrix cold.

Per model, each figure a process of its own timed from start to exit (wall time, and CPU time: user + system of
the process and every process it waited for, so a vLLM worker counts), one after the other in the same run:

- **audit**: ``tito-audit audit MODEL --mirror ...`` as a user runs it (default settings: ``--parser auto``, every
  variant), its peak resident memory beside (the largest process of its tree);
- **naive**: ``naive_reference.py``: import transformers, load the tokenizer, render and tokenize every prefix of
  96 fixed four-call tool conversations (the audit's built-in tools declared) with ``apply_chat_template``: 960
  renders;
- **floor**: the same process rendering and tokenizing each distinct prefix of the audit's own conversations
  (every variant's, as generated for it) once, nothing else.

``--matrix`` then times ``make matrix``'s command cold (no stored results, a fresh output folder): wall and CPU time.
The host's load average is printed beside every row: on a shared machine compare the ratios and CPU times.

Run: ``python benchmarks/bench_audit.py --mirror ../shared/tokenizers`` (``make bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_MODELS = ["Qwen/Qwen3-4B", "google/gemma-4-E2B-it", "Qwen/Qwen3.5-0.8B", "openai/gpt-oss-20b"]
MATRIX_ARGS = [
    "--mirror",
    "../shared/tokenizers",
    "--mirror",
    "../shared/templates",
    "--conversations",
    "../shared/conversations/tau-bench/gpt-4o-airline.json",
    "--conversations",
    "../shared/conversations/swe-agent/function_calling_simple.traj",
    "--conversations",
    "../shared/conversations/swe-agent/marshmallow-1867__function_calling.traj",
    "--conversations",
    "../shared/conversations/miles-mock/mock_trajectories.json",
    "--limit",
    "20",
    "--no-hub",
]
"""``make matrix``'s arguments (the Makefile's ``matrix`` target), run from the project's folder."""


@dataclass
class Timed:
    wall: float
    cpu: float
    peak_mb: float
    returncode: int
    stdout: str


def timed(command: list[str], cwd: Path = ROOT) -> Timed:
    """Run ``command`` to its end: wall time, CPU time of its whole tree (user + system of it and of every process it
    waited for), the peak resident memory of its largest process."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return Timed(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode, text)


def load() -> str:
    return "/".join(f"{figure:.1f}" for figure in os.getloadavg())


def floor_prefixes(model_id: str, mirrors: list[str], report: dict, target: Path) -> int:
    """Write the distinct prefixes of the audit's conversations (each variant's, generated for its profile), every
    prefix without a generation prompt and every prompt of an assistant turn, as the floor renders them."""
    sys.path.insert(0, str(ROOT))
    from tito_audit.audit.audit_options import AuditOptions, conversation_source
    from tito_audit.audit.variant import VariantAudit
    from tito_audit.model.load_by_id import load_by_id
    from tito_audit.model.load_folder import codec_for
    from tito_audit.model.variants import Variant

    loaded = load_by_id(model_id, mirrors=[Path(m) for m in mirrors], allow_hub=False)
    codec = codec_for(loaded)
    options = AuditOptions()
    conversations_for = conversation_source(options)
    seen: set[str] = set()
    prefixes = []
    for entry in report["variants"]:
        kwargs = entry["kwargs"]
        variant = Variant(entry["name"], kwargs)
        profile = VariantAudit(loaded, codec, variant, options).profile
        for conversation in conversations_for(profile):
            messages = conversation.messages
            keys = [(k, False) for k in range(1, len(messages) + 1)]
            keys += [(j, True) for j, message in enumerate(messages) if message["role"] == "assistant"]
            for k, gp in keys:
                item = [messages[:k], conversation.tools, gp, kwargs]
                key = json.dumps(item, sort_keys=True, default=str)
                if key not in seen:
                    seen.add(key)
                    prefixes.append(item)
    target.write_text(json.dumps(prefixes, default=str))
    return len(prefixes)


def folder_of(model_id: str, mirrors: list[str]) -> Path | None:
    for mirror in mirrors:
        folder = (ROOT / mirror / model_id.replace("/", "--")).resolve()
        if folder.is_dir():
            return folder
    return None


def bench_model(model_id: str, args: argparse.Namespace, work: Path) -> dict:
    mirrors = [item for mirror in args.mirror for item in ("--mirror", mirror)]
    python = sys.executable
    row: dict = {"model": model_id, "load_before": load()}
    report_path = work / "report.json"
    parser = ["--parser", args.parser] if args.parser else []
    audit = timed([args.tito_audit, "audit", model_id, *mirrors, *parser, "--json", str(report_path)])
    if audit.returncode not in (0, 1):
        row["error"] = f"tito-audit audit exited {audit.returncode}"
        return row
    report = json.loads(report_path.read_text())
    row.update(
        variants=len(report["variants"]),
        parsers=report["settings"]["parsers"],
        audit_wall=audit.wall,
        audit_cpu=audit.cpu,
        audit_mb=audit.peak_mb,
    )
    folder = folder_of(model_id, args.mirror)
    if folder is None or report["model"]["backend"] != "jinja":
        return row
    tools = work / "tools.json"
    sys.path.insert(0, str(ROOT))
    from tito_audit.conversations.tools import tool_schemas

    tools.write_text(json.dumps(tool_schemas()))
    naive = timed([python, str(HERE / "naive_reference.py"), str(folder), "--tools", str(tools)])
    prefixes = work / "prefixes.json"
    row["floor_renders"] = floor_prefixes(model_id, args.mirror, report, prefixes)
    floor = timed([python, str(HERE / "naive_reference.py"), str(folder), "--floor", str(prefixes)])
    row.update(
        naive_wall=naive.wall,
        naive_cpu=naive.cpu,
        naive_mb=naive.peak_mb,
        floor_wall=floor.wall,
        floor_cpu=floor.cpu,
        load_after=load(),
    )
    return row


def print_row(row: dict) -> None:
    if "error" in row:
        print(f"{row['model']:32s} {row['error']}")
        return
    naive = row.get("naive_wall")
    cells = [
        f"{row['model']:32s}",
        f"{row['variants']:>3d}",
        f"{row['audit_wall']:7.1f} {row['audit_cpu']:7.1f}",
    ]
    if naive:
        cells += [
            f"{row['naive_wall']:6.1f} {row['naive_cpu']:6.1f}",
            f"{row['audit_wall'] / row['naive_wall']:5.1f}x {row['audit_cpu'] / row['naive_cpu']:5.1f}x",
            f"{row['floor_wall']:6.1f} {row['floor_cpu']:6.1f} ({row['floor_renders']})",
        ]
    else:
        cells += ["    –      –", "    –      –", "    –      –"]
    cells += [f"{row['audit_mb']:6.0f}", f"{row['load_before']}"]
    print("  ".join(cells), flush=True)


def bench_matrix(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-matrix-") as out:
        before = load()
        command = [args.tito_audit, "matrix", *MATRIX_ARGS, "--no-results-cache", "--out", out]
        result = timed(command)
        return {
            "wall": result.wall,
            "cpu": result.cpu,
            "returncode": result.returncode,
            "load": before,
            "after": load(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help=f"model ids (default: {', '.join(DEFAULT_MODELS)})")
    parser.add_argument("--mirror", action="append", default=[])
    parser.add_argument("--all", action="store_true", help="every model folder of the mirrors")
    parser.add_argument("--matrix", action="store_true", help="then time make matrix's command cold")
    parser.add_argument("--tito-audit", default=str(Path(sys.executable).with_name("tito-audit")))
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument(
        "--parser",
        default=None,
        help="the audit's --parser (default: its own default, auto); template, sglang or vllm time one engine's share",
    )
    args = parser.parse_args()
    models = args.models or DEFAULT_MODELS
    if args.all:
        models = sorted(
            folder.name.replace("--", "/", 1)
            for mirror in args.mirror
            for folder in (ROOT / mirror).iterdir()
            if (folder / "tokenizer_config.json").is_file()
        )
    print(f"cores {os.cpu_count()}, load average {load()} (1/5/15 min); wall / CPU seconds (CPU: the whole tree)")
    header = (
        f"{'model':32s}  {'var':>3s}  {'audit wall/cpu':>15s}  {'naive w/cpu':>13s}  {'x naive':>13s}  "
        f"{'floor w/cpu (renders)':>22s}  {'peak MB':>6s}  load"
    )
    print(header)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        for model_id in models:
            row = bench_model(model_id, args, Path(tmp))
            rows.append(row)
            print_row(row)
    figures: dict = {"models": rows}
    if args.matrix:
        matrix = bench_matrix(args)
        figures["matrix"] = matrix
        print(
            f"make matrix cold: {matrix['wall'] / 60:.1f} min wall, {matrix['cpu'] / 60:.1f} min CPU, exit "
            f"{matrix['returncode']} (load average {matrix['load']} before, {matrix['after']} after)"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
