"""Scale benchmark: the matrix over thousands of fine-tune ids that share their base model's files.

Builds a synthetic mirror in a temporary folder: every corpus folder (``--mirror``, e.g. ``../shared/tokenizers``
and ``../shared/templates``) as its own id plus ``--copies`` fine-tune ids whose folders are symlinks to its files,
and ``--edited`` ids whose template differs by one comment. Then runs the matrix cold (empty results store) and
warm (same store), with ``--backend local`` and ``--backend ray`` (when Ray is installed), and prints distinct
pairs, audits done, wall time and files rewritten. Nothing is written outside the temporary folder.

    python benchmarks/bench_scale.py --mirror ../shared/tokenizers --mirror ../shared/templates
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from tito_audit.matrix.run import MatrixOptions, MatrixRun, run_matrix
from tito_audit.matrix.tables import write_matrix
from tito_audit.model.resolve import follow_symlink_stub

WIDTHS = (6, 6, 8, 8, 8, 10)


def build_mirror(sources: list[Path], root: Path, copies: int, edited: int) -> list[str]:
    """The synthetic mirror under ``root``; returns its model ids."""
    ids: list[str] = []
    first_by_name: dict[str, Path] = {}
    for source in sources:  # a name in two mirrors: the first mirror wins, as in resolution
        for folder in sorted(source.iterdir()):
            if folder.is_dir() and "--" in folder.name:
                first_by_name.setdefault(folder.name, folder)
    folders = [first_by_name[name] for name in sorted(first_by_name)]
    for index, folder in enumerate(folders):
        org, name = folder.name.split("--", 1)
        variants = [(folder.name, None)] + [(f"ft{j:03d}--{org}-{name}-ft", None) for j in range(copies)]
        if index < edited:
            variants.append((f"edited--{org}-{name}", f"{{# edited copy {index} #}}"))
        for target_name, template_edit in variants:
            target = root / target_name
            target.mkdir()
            for item in folder.rglob("*"):
                if item.is_dir() or ".git" in item.parts:
                    continue
                link = target / item.relative_to(folder)
                link.parent.mkdir(parents=True, exist_ok=True)
                real = follow_symlink_stub(item).resolve()
                if template_edit is not None and item.name == "chat_template.jinja":
                    link.write_text(real.read_text(encoding="utf-8") + template_edit, encoding="utf-8")
                else:
                    link.symlink_to(real)
            ids.append(target_name.replace("--", "/", 1))
    return ids


def timed_run(ids: list[str], options: MatrixOptions) -> tuple[float, MatrixRun, int]:
    before = {p: p.stat().st_mtime_ns for p in options.out_dir.rglob("*") if p.is_file()}
    started = time.perf_counter()
    run = run_matrix(ids, options)
    write_matrix(run.rows, options.out_dir, options.settings_record(ids))
    wall = time.perf_counter() - started
    after = {p: p.stat().st_mtime_ns for p in options.out_dir.rglob("*") if p.is_file()}
    rewritten = sum(1 for p, mtime in after.items() if before.get(p) != mtime)
    return wall, run, rewritten


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", action="append", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=32, help="fine-tune ids per corpus folder")
    parser.add_argument("--edited", type=int, default=5, help="ids with an edited template")
    parser.add_argument("--count", type=int, default=24, help="generated conversations per variant")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--backend", action="append", choices=["local", "ray"], help="default: both")
    args = parser.parse_args()
    backends = args.backend or ["local", "ray"]
    with tempfile.TemporaryDirectory(prefix="tito-audit-scale-") as tmp:
        root = Path(tmp)
        (root / "mirror").mkdir()
        started = time.perf_counter()
        ids = build_mirror(args.mirror, root / "mirror", args.copies, args.edited)
        print(f"synthetic mirror: {len(ids)} model ids, built in {time.perf_counter() - started:.1f} s")
        figures = []
        for backend in backends:
            if backend == "ray":
                try:
                    import ray
                except ImportError:
                    print("ray: not installed (pip install -e .[ray]); skipped")
                    continue
                os.environ.setdefault("RAY_AUTH_MODE", "disabled")
                started = time.perf_counter()
                ray.init(num_cpus=args.jobs, include_dashboard=False, log_to_driver=False)
                print(f"ray: local instance started in {time.perf_counter() - started:.1f} s")
            options = MatrixOptions(
                out_dir=root / f"out-{backend}",
                mirrors=[root / "mirror"],
                allow_hub=False,
                count=args.count,
                jobs=args.jobs,
                results_cache=root / f"store-{backend}",
                backend=backend,
            )
            for phase in ("cold", "warm"):
                wall, run, rewritten = timed_run(ids, options)
                figures.append((backend, phase, run, wall, rewritten))
            if backend == "ray":
                ray.shutdown()
        print()
        header = ("backend", "run", "ids", "pairs", "audited", "wall s", "s/audit", "rewritten")
        print(f"{header[0]:8} {header[1]:5} " + " ".join(f"{h:>{w}}" for h, w in zip(header[2:], WIDTHS, strict=True)))
        for backend, phase, run, wall, rewritten in figures:
            per_audit = f"{wall / run.audited:.2f}" if run.audited else "-"
            cells = (run.model_ids, run.pairs, run.audited, f"{wall:.1f}", per_audit, rewritten)
            print(f"{backend:8} {phase:5} " + " ".join(f"{c:>{w}}" for c, w in zip(cells, WIDTHS, strict=True)))
        cold = {backend: (run, wall) for backend, phase, run, wall, _ in figures if phase == "cold"}
        if "local" in cold and "ray" in cold and cold["ray"][0].audited:
            extra = (cold["ray"][1] - cold["local"][1]) / cold["ray"][0].audited
            print(f"\nray vs local, cold: {extra:+.2f} s per audit ({cold['ray'][0].audited} audits)")


if __name__ == "__main__":
    main()
