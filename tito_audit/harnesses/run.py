"""The harness matrix, run: for each model and each engine's documented parser, one group (:mod:`.group`) runs the
harnesses whose cells are not stored yet; a default configuration that keeps less than every sampled id then has its
fixes run too (a second pass). Every cell is stored under the digest of what decides it (:func:`cell_key`), so a
rerun with nothing changed runs nothing and the pages it writes are the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tito_audit
from tito_audit.harnesses.catalogue import HARNESSES, harness_named
from tito_audit.harnesses.group import ROLLOUT_SECONDS
from tito_audit.harnesses.harness import FIX_ROLE, Configuration, Harness
from tito_audit.harnesses.isolation import isolated_argv, namespaces_available
from tito_audit.harnesses.rows import row_of, trainable_share
from tito_audit.matrix.store import PairKey, ResultsStore, digest_of

MODELS = (
    "Qwen/Qwen3-4B",
    "Qwen/Qwen2.5-7B-Instruct",
    "openai/gpt-oss-20b",
    "meta-llama/Llama-3.1-8B-Instruct",
    "google/gemma-4-E2B-it",
)
PARSERS = ("sglang", "vllm")
RUN_PACKAGES = ("model", "conversations", "parse", "audit", "session", "gateway", "data", "harnesses")
"""The packages whose code decides what a cell records (the pages' own modules aside: :data:`PAGE_MODULES`)."""
PAGE_MODULES = (
    "harnesses/rows.py",
    "harnesses/publish.py",
    "harnesses/run.py",
    "harnesses/page.py",
    "harnesses/install.py",
)


@dataclass
class TableOptions:
    models: Sequence[str] = MODELS
    parsers: Sequence[str] = PARSERS
    harnesses: Sequence[str] = field(default_factory=lambda: [h.name for h in HARNESSES])
    rollouts: int = 2
    seed: int = 0
    store: Path | None = Path("out/harnesses-store")
    installed: Path = Path(".venv/harnesses")
    mirrors: Sequence[str] = ("../shared/tokenizers",)
    isolate: bool = True
    jobs: int = 2
    """Groups run at once (each a process with its gateway; the harnesses of a group run one after another)."""


@dataclass
class Cell:
    harness: Harness
    configuration: Configuration
    model: str
    parser: str


def run_fingerprint() -> str:
    """A digest of the code a cell's record depends on (:data:`RUN_PACKAGES`)."""
    root = Path(tito_audit.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if relative.split("/")[0] not in RUN_PACKAGES or relative in PAGE_MODULES or "__pycache__" in relative:
            continue
        if path.suffix in (".py", ".json", ".jinja"):
            digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def model_files(model: str, mirrors: Sequence[str]) -> dict[str, str]:
    """The sha256 of each file of the model's folder in the first mirror that has it."""
    for mirror in mirrors:
        folder = Path(mirror) / model.replace("/", "--")
        if folder.is_dir():
            return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}
    return {}


def cell_key(cell: Cell, options: TableOptions, fingerprint: str, files: dict[str, str]) -> PairKey:
    material = {
        "harness": [cell.harness.name, cell.harness.package, cell.harness.version, list(cell.harness.requirements)],
        "configuration": [cell.configuration.name, list(cell.configuration.options)],
        "gateway_options": dict(cell.configuration.gateway_options),
        "model": cell.model,
        "model_files": files,
        "parser": cell.parser,
        "rollouts": options.rollouts,
        "seed": options.seed,
        "code": fingerprint,
    }
    return PairKey(digest_of(material), material)


def first_prompt(record: dict) -> int | None:
    sizes = [s["first_prompt"] for s in record.get("sessions") or [] if s.get("first_prompt")]
    return min(sizes) if sizes else None


def run_group(
    cells: list[Cell],
    options: TableOptions,
    isolate: bool,
    log: Callable[[str], None],
    first_prompts: dict[str, int] | None = None,
) -> list[dict]:
    """Run ``cells`` (one model, one parser) in one group process; its cells' records, in order."""
    spec = {
        "model": cells[0].model,
        "parser": cells[0].parser,
        "cells": [[c.harness.name, c.configuration.name] for c in cells],
        "rollouts": options.rollouts,
        "seed": options.seed,
        "mirrors": [str(Path(m).resolve()) for m in options.mirrors],
        "installed": str(options.installed.resolve()),
        "first_prompts": first_prompts or {},
    }
    with tempfile.TemporaryDirectory(prefix="tito-harness-group-") as folder:
        spec_path, out_path = Path(folder) / "spec.json", Path(folder) / "out.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        argv = [sys.executable, "-m", "tito_audit.harnesses.group", str(spec_path), str(out_path)]
        argv = isolated_argv(argv) if isolate else argv
        limit = len(cells) * options.rollouts * ROLLOUT_SECONDS + 300
        log(f"{spec['model']} × {spec['parser']}: {len(cells)} harness configurations")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False)
        if done.returncode != 0 or not out_path.exists():
            tail = " ".join(done.stderr.strip().splitlines()[-3:])[-600:]
            raise RuntimeError(f"the group {spec['model']} × {spec['parser']} failed (exit {done.returncode}): {tail}")
        return list(json.loads(out_path.read_text(encoding="utf-8")))


def run_cells(
    cells: list[Cell], options: TableOptions, store: ResultsStore, isolate: bool, log: Callable[[str], None]
) -> dict[int, dict]:
    """Every cell's record, from the store or run (grouped by model and parser); by the cell's index."""
    fingerprint = run_fingerprint()
    files = {model: model_files(model, options.mirrors) for model in {c.model for c in cells}}
    keys = [cell_key(c, options, fingerprint, files[c.model]) for c in cells]
    found: dict[int, dict] = {}
    missing: dict[tuple[str, str], list[int]] = {}
    for index, (cell, key) in enumerate(zip(cells, keys, strict=True)):
        stored = store.get(key)
        if stored is not None:
            found[index] = stored
        else:
            missing.setdefault((cell.model, cell.parser), []).append(index)
    groups = list(missing.values())
    known: dict[tuple[str, str, str], int] = {}
    for index, record in found.items():
        size = first_prompt(record) if cells[index].configuration.name == "default" else None
        if size is not None:
            known[(cells[index].model, cells[index].parser, cells[index].harness.name)] = size

    def run(indices: list[int]) -> list[dict]:
        model, parser = cells[indices[0]].model, cells[indices[0]].parser
        sizes = {name: size for (m, p, name), size in known.items() if (m, p) == (model, parser)}
        return run_group([cells[i] for i in indices], options, isolate, log, sizes)

    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        ran = pool.map(run, groups)
        for indices, records in zip(groups, ran, strict=True):
            for index, record in zip(indices, records, strict=True):
                store.put(keys[index], record)
                found[index] = record
    return found


def run_table(options: TableOptions, log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """The table's rows (every harness × configuration × model × parser run), with how long it took."""
    started = time.monotonic()
    isolate = options.isolate and namespaces_available()
    store = ResultsStore(options.store)
    harnesses = [harness_named(name) for name in options.harnesses]
    first = [
        Cell(h, c, m, p)
        for m in options.models
        for p in options.parsers
        for h in harnesses
        for c in h.configurations
        if c.role != FIX_ROLE
    ]
    records = run_cells(first, options, store, isolate, log)
    rows = [row_of(c.harness, c.configuration, c.model, c.parser, records[i]) for i, c in enumerate(first)]
    below = [
        c for c, row in zip(first, rows, strict=True) if c.configuration.name == "default" and trainable_share(row) < 1
    ]
    fixes = [
        Cell(c.harness, f, c.model, c.parser) for c in below for f in c.harness.configurations if f.role == FIX_ROLE
    ]
    fixed = run_cells(fixes, options, store, isolate, log) if fixes else {}
    rows += [row_of(c.harness, c.configuration, c.model, c.parser, fixed[i]) for i, c in enumerate(fixes)]
    return {
        "rows": rows,
        "rollouts": options.rollouts,
        "seed": options.seed,
        "isolated": isolate,
        "store": {"hits": store.counts.hits, "misses": store.counts.misses, "notes": store.notes},
        "seconds": round(time.monotonic() - started, 1),
    }
