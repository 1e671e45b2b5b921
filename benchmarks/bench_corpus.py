"""Corpus benchmark: ``tito-audit matrix --corpus`` on a sample of the template corpus, cold and warm.

Takes ``--sample`` entries spread evenly over the corpus sorted by downloads (most downloaded, middle, tail; the
whole corpus with ``--sample 0``), builds a corpus folder of them in a temporary folder (its index.json and
symlinks to the templates), then runs the corpus matrix cold (empty results store) and warm (same store) with
``--jobs`` worker processes. Prints templates per second, the slowest ten templates, the published size per
template, and the projection of the cold time, warm time and size to the whole corpus. Nothing is written outside
the temporary folder.

    python benchmarks/bench_corpus.py --corpus ../shared/template-corpus --mirror ../shared/tokenizers --sample 30
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tito_audit.cli.matrix_corpus import CORPUS_COUNT, CORPUS_EXAMPLES_PER_GROUP, CORPUS_WAY_OUT_BUDGET
from tito_audit.matrix.corpus_run import run_corpus
from tito_audit.matrix.matrix_options import MatrixOptions


def sample_corpus(corpus: Path, size: int, root: Path, offset: float = 0.0) -> tuple[Path, int]:
    """A corpus folder under ``root`` holding ``size`` entries spread over downloads; and the whole corpus's size."""
    entries = json.loads((corpus / "index.json").read_text(encoding="utf-8"))
    ordered = sorted(entries, key=lambda e: (-e["downloads"], e["name"]))
    if 0 < size < len(ordered):
        step = len(ordered) / size
        ordered = [ordered[int((i + offset) * step)] for i in range(size)]
    folder = root / "corpus"
    (folder / "templates").mkdir(parents=True)
    for entry in ordered:
        name = f"{entry['name']}.jinja"
        (folder / "templates" / name).symlink_to((corpus / "templates" / name).resolve())
    (folder / "index.json").write_text(json.dumps(ordered), encoding="utf-8")
    return folder, len(entries)


def _warm_cli(folder: Path, root: Path, args: argparse.Namespace) -> float:
    """Seconds of ``tito-audit matrix --corpus`` in a new process over the stored results of the cold run."""
    command = [sys.executable, "-m", "tito_audit", "matrix", "--corpus", str(folder), "--no-hub"]
    command += [f"--mirror={m}" for m in args.mirror]
    command += ["--out", str(root / "out-warm"), "--results-cache", str(root / "results"), "--cache-dir"]
    command += [str(root / "stage"), "--count", str(args.count), "--jobs", str(args.jobs)]
    started = time.monotonic()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    seconds = time.monotonic() - started
    print("warm run:", " ".join(line for line in done.stdout.splitlines() if "corpus templates audited" in line))
    return seconds


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its ended children (the matrix's workers): what the audits cost,
    whatever else the machine runs meanwhile."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("../shared/template-corpus"))
    parser.add_argument("--mirror", type=Path, action="append", default=[])
    parser.add_argument("--sample", type=int, default=30, help="entries spread over downloads (0: all)")
    parser.add_argument("--offset", type=float, default=0.0, help="where in each stretch to take the entry (0..1)")
    parser.add_argument("--count", type=int, default=CORPUS_COUNT)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rows", type=Path, help="also write the cold run's rows to this JSON file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tito-bench-corpus-") as tmp:
        root = Path(tmp)
        folder, whole = sample_corpus(args.corpus, args.sample, root, args.offset)
        options = MatrixOptions(
            out_dir=root / "out",
            mirrors=args.mirror,
            allow_hub=False,
            count=args.count,
            jobs=args.jobs,
            examples_per_group=CORPUS_EXAMPLES_PER_GROUP,
            way_out_budget=CORPUS_WAY_OUT_BUDGET,
            results_cache=root / "results",
        )
        started, cpu_started = time.monotonic(), _cpu_seconds()
        cold = run_corpus(folder, options, root / "stage", on_problem=print)
        cold_seconds, cold_cpu = time.monotonic() - started, _cpu_seconds() - cpu_started
        warm_seconds = _warm_cli(folder, root, args)
        empty = root / "empty"
        (empty / "templates").mkdir(parents=True)
        (empty / "index.json").write_text("[]", encoding="utf-8")
        fixed_seconds = _warm_cli(empty, root, args)
        n = len(cold.rows)
        if args.rows is not None:
            args.rows.write_text(json.dumps(cold.rows, indent=1), encoding="utf-8")
        pages = list((root / "out" / "templates").glob("*.html"))
        page_bytes = sum(p.stat().st_size for p in pages)
        shared_bytes = _size(root / "out") - page_bytes
        print(f"templates: {n} (of {whole}), count {args.count}, jobs {args.jobs}")
        print(f"cold: {cold_seconds:.1f} s, {n / cold_seconds:.2f} templates/s, {cold.audited} audited")
        print(
            f"cold CPU (this process and its workers): {cold_cpu:.1f} s, {cold_cpu / n:.2f} s per template; "
            f"on {args.jobs} free cores: {n * args.jobs / cold_cpu:.2f} templates/s"
        )
        print(f"warm (a new process, as from the shell): {warm_seconds:.1f} s, of which {fixed_seconds:.1f} s fixed")
        statuses: dict[str, int] = {}
        for row in cold.rows:
            key = row["verdict"] or row["status"]
            statuses[key] = statuses.get(key, 0) + 1
        print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
        print("slowest ten (audit seconds in its worker):")
        timed = sorted(cold.rows, key=lambda r: -(r["duration_seconds"] or 0))[:10]
        for row in timed:
            print(f"  {row['duration_seconds'] or 0:7.2f} s  {row['name']}  ({row['verdict'] or row['status']})")
        print(
            f"pages: {len(pages)}, {page_bytes / max(len(pages), 1) / 1024:.1f} KiB each; other files {shared_bytes} B"
        )
        scale = whole / n
        print(
            f"projected for {whole} templates: cold {cold_seconds * scale / 60:.1f} min as measured, "
            f"{cold_cpu / args.jobs * scale / 60:.1f} min on {args.jobs} free cores, "
            f"warm {fixed_seconds + (warm_seconds - fixed_seconds) * scale:.0f} s, "
            f"reports {(page_bytes + shared_bytes) * scale / 2**20:.1f} MiB"
        )


if __name__ == "__main__":
    main()
