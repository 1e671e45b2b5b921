"""The harness matrix, run: the cells not stored yet, grouped by model and engine parser (:mod:`.group`), the groups
spread over a few lanes (:mod:`.lane`: one process each, in a network namespace of its own, the groups of one
engine's parsers together where it can: vLLM's parser process then starts once); a default configuration that keeps
less than every sampled id has its fixes run right after it. Every cell is stored under the digest of what decides it
(:func:`cell_key`: :mod:`.fingerprint`), as soon as its lane has run it, so a rerun with nothing changed runs nothing
and the pages it writes are the same bytes, and a change to one harness reruns its rows only.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.harnesses.catalogue import HARNESSES, harness_named
from tito_audit.harnesses.fingerprint import harness_digests, runner_digest
from tito_audit.harnesses.group import ROLLOUT_SECONDS, kept_share
from tito_audit.harnesses.harness import DEFAULT, FIX_ROLE, Configuration, Harness
from tito_audit.harnesses.isolation import isolated_argv, namespaces_available
from tito_audit.harnesses.rows import row_of
from tito_audit.matrix.store import PairKey, ResultsStore, digest_of

MODELS = (
    "Qwen/Qwen3-4B",
    "Qwen/Qwen2.5-7B-Instruct",
    "openai/gpt-oss-20b",
    "meta-llama/Llama-3.1-8B-Instruct",
    "google/gemma-4-E2B-it",
)
PARSERS = ("sglang", "vllm")
POLL_SECONDS = 1.0


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
    """Lanes run at once (each a process with its gateways and zygotes; its groups and harnesses one after another)."""


@dataclass(frozen=True)
class Cell:
    harness: Harness
    configuration: Configuration
    model: str
    parser: str

    @property
    def where(self) -> tuple[str, str, str, str]:
        return (self.model, self.parser, self.harness.name, self.configuration.name)


def model_files(model: str, mirrors: Sequence[str]) -> dict[str, str]:
    """The sha256 of each file of the model's folder in the first mirror that has it."""
    for mirror in mirrors:
        folder = Path(mirror) / model.replace("/", "--")
        if folder.is_dir():
            return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}
    return {}


@dataclass
class Keys:
    """What every cell's key is made of but its own: the runner's digest, each harness's, each model's files."""

    runner: str
    harnesses: dict[str, str]
    models: dict[str, dict[str, str]]

    @classmethod
    def of(cls, cells: Sequence[Cell], mirrors: Sequence[str]) -> Keys:
        return cls(
            runner_digest(),
            harness_digests({c.harness.name: c.harness for c in cells}.values()),
            {m: model_files(m, mirrors) for m in sorted({c.model for c in cells})},
        )


def cell_key(cell: Cell, options: TableOptions, keys: Keys) -> PairKey:
    """What decides a cell's record (:mod:`.fingerprint`): the runner's code, the harness's own code, its package and
    pinned version, the configuration, the model's files, the parser, the rollouts and the seed."""
    material = {
        "harness": [cell.harness.name, cell.harness.package, cell.harness.version, list(cell.harness.requirements)],
        "configuration": [cell.configuration.name, list(cell.configuration.options)],
        "gateway_options": dict(cell.configuration.gateway_options),
        "model": cell.model,
        "model_files": keys.models[cell.model],
        "parser": cell.parser,
        "rollouts": options.rollouts,
        "seed": options.seed,
        "runner": keys.runner,
        "harness_code": keys.harnesses[cell.harness.name],
    }
    return PairKey(digest_of(material), material)


def fixes_of(harness: Harness) -> list[Configuration]:
    return [c for c in harness.configurations if c.role == FIX_ROLE]


@dataclass
class Plan:
    """What a run does: every cell's record found in the store, and per (model, parser) the cells to run and the
    harnesses whose fixes run after their default if it keeps less than every id."""

    found: dict[tuple[str, str, str, str], dict] = field(default_factory=dict)
    to_run: dict[tuple[str, str], list[Cell]] = field(default_factory=dict)
    fixes_after: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    chains: dict[tuple[str, str], list[tuple[str, list[str]]]] = field(default_factory=dict)


def plan(cells: list[Cell], options: TableOptions, store: ResultsStore, keys: Keys) -> Plan:
    done = Plan()
    for cell in cells:
        stored = store.get(cell_key(cell, options, keys))
        if stored is not None:
            done.found[cell.where] = stored
            continue
        done.to_run.setdefault((cell.model, cell.parser), []).append(cell)
    for cell in cells:
        if cell.configuration.name != DEFAULT.name or not fixes_of(cell.harness):
            continue
        group = (cell.model, cell.parser)
        default = done.found.get(cell.where)
        if default is None:  # it runs now: its lane runs the fixes after it if they are needed
            done.fixes_after.setdefault(group, []).append(cell.harness.name)
            continue
        if kept_share(default) >= 1:
            continue
        fixes = fixes_of(cell.harness)
        for index, fix in enumerate(fixes):  # in order, until one keeps every id: the first not stored runs on
            fixed = Cell(cell.harness, fix, cell.model, cell.parser)
            stored = store.get(cell_key(fixed, options, keys))
            if stored is None:
                names = [f.name for f in fixes[index:]]
                done.chains.setdefault(group, []).append((cell.harness.name, names))
                break
            done.found[fixed.where] = stored
            if kept_share(stored) >= 1:
                break
    return done


def lanes_of(groups: list[tuple[str, str]], jobs: int) -> list[list[tuple[str, str]]]:
    """The groups spread over at most ``jobs`` lanes: one engine's parsers in one lane while there are lanes enough
    (vLLM's parser process starts once per lane), the rest dealt round."""
    lanes = max(1, min(jobs, len(groups)))
    by_parser: dict[str, list[tuple[str, str]]] = {}
    for group in groups:
        by_parser.setdefault(group[1], []).append(group)
    if len(by_parser) == lanes:
        return [by_parser[p] for p in sorted(by_parser)]
    out: list[list[tuple[str, str]]] = [[] for _ in range(lanes)]
    for index, group in enumerate(sorted(groups, key=lambda g: (g[1], g[0]))):
        out[index % lanes].append(group)
    return [lane for lane in out if lane]


def run_lane(
    number: int,
    groups: list[dict[str, Any]],
    isolate: bool,
    log: Callable[[str], None],
    kept: Callable[[dict], None],
) -> None:
    """Run one lane's groups in a process of its own, each cell handed to ``kept`` as soon as the lane has run it."""
    with tempfile.TemporaryDirectory(prefix="tito-harness-lane-") as folder:
        spec_path, out_path = Path(folder) / "spec.json", Path(folder) / "out.jsonl"
        spec_path.write_text(json.dumps({"lane": number, "groups": groups}), encoding="utf-8")
        out_path.touch()
        argv = [sys.executable, "-m", "tito_audit.harnesses.lane", str(spec_path), str(out_path)]
        argv = isolated_argv(argv) if isolate else argv
        cells = sum(len(g["cells"]) for g in groups)
        limit = time.monotonic() + 2 * cells * groups[0]["rollouts"] * ROLLOUT_SECONDS + 300 * len(groups)
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        tail: list[str] = []

        def relay() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                tail.append(line.rstrip())
                del tail[:-5]
                if " × " in line:  # the lane's progress (the gateway's own warnings stay in the tail)
                    log(line.strip())

        reader = threading.Thread(target=relay, daemon=True)
        reader.start()
        offset = 0
        try:
            while True:
                ended = process.poll() is not None
                offset = _take(out_path, offset, kept)
                if ended:
                    break
                if time.monotonic() > limit:
                    process.kill()
                    raise RuntimeError(f"lane {number} ran past its time limit")
                time.sleep(POLL_SECONDS)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            reader.join(timeout=10)
        if process.returncode != 0:
            raise RuntimeError(f"lane {number} failed (exit {process.returncode}): {' '.join(tail)[-600:]}")


def _take(path: Path, offset: int, kept: Callable[[dict], None]) -> int:
    """Hand each whole line written to ``path`` past ``offset`` to ``kept``; the offset after them."""
    with path.open("rb") as lines:
        lines.seek(offset)
        data = lines.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        if line.strip():
            kept(json.loads(line))
    return offset + end


def run_table(options: TableOptions, log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """The table's rows (every harness × configuration × model × parser run), with how long it took."""
    started = time.monotonic()
    isolate = options.isolate and namespaces_available()
    store = ResultsStore(options.store)
    harnesses = [harness_named(name) for name in options.harnesses]
    always = [
        Cell(h, c, m, p)
        for m in options.models
        for p in options.parsers
        for h in harnesses
        for c in h.configurations
        if c.role != FIX_ROLE
    ]
    every = always + [
        Cell(c.harness, f, c.model, c.parser) for c in always if c.configuration == DEFAULT for f in fixes_of(c.harness)
    ]
    keys = Keys.of(every, options.mirrors)
    by_where = {c.where: c for c in every}
    done = plan(always, options, store, keys)
    lock = threading.Lock()

    def kept(line: dict) -> None:
        cell = by_where[(line["model"], line["parser"], line["harness"], line["configuration"])]
        record = {k: v for k, v in line.items() if k not in ("model", "parser")}
        with lock:
            store.put(cell_key(cell, options, keys), record)
            done.found[cell.where] = record

    groups = sorted(set(done.to_run) | set(done.chains))
    specs = {
        group: {
            "model": group[0],
            "parser": group[1],
            "cells": [[c.harness.name, c.configuration.name] for c in done.to_run.get(group, [])],
            "fixes": done.fixes_after.get(group, []),
            "chains": done.chains.get(group, []),
            "rollouts": options.rollouts,
            "seed": options.seed,
            "mirrors": [str(Path(m).resolve()) for m in options.mirrors],
            "installed": str(options.installed.resolve()),
        }
        for group in groups
    }
    lanes = lanes_of(groups, options.jobs)
    with ThreadPoolExecutor(max_workers=max(1, len(lanes))) as pool:
        futures = [
            pool.submit(run_lane, n, [specs[g] for g in lane], isolate, log, kept) for n, lane in enumerate(lanes)
        ]
        for future in futures:
            future.result()
    rows = [
        row_of(c.harness, c.configuration, c.model, c.parser, done.found[c.where])
        for c in every
        if c.where in done.found
    ]
    return {
        "rows": rows,
        "rollouts": options.rollouts,
        "seed": options.seed,
        "isolated": isolate,
        "store": {"hits": store.counts.hits, "misses": store.counts.misses, "notes": store.notes},
        "seconds": round(time.monotonic() - started, 1),
    }
