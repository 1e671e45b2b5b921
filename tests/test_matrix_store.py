"""The matrix at scale: one audit per (template, tokenizer) pair, stored results keyed by everything that decides
them, corrupt entries recomputed, interrupted runs resumed, unchanged re-runs that rewrite nothing, and the Ray
backend producing the same files as the local one."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests import templates
from tito_audit.errors import BadInputError
from tito_audit.formatters.json_report import VOLATILE_KEYS
from tito_audit.matrix import backends as matrix_backends
from tito_audit.matrix import store as results_cache
from tito_audit.matrix.row import VOLATILE_COLUMNS
from tito_audit.matrix.run import MatrixOptions, run_matrix
from tito_audit.matrix.tables import write_matrix

BASE, FINE_TUNE, OTHER = "acme/base", "acme/base-ft", "acme/other"


@pytest.fixture
def mirror(tmp_path, tiny_model_dir) -> Path:
    """``acme/base``; ``acme/base-ft``: a fine-tune whose files are symlinks to the base's; ``acme/other``: the
    same tokenizer with another template."""
    root = tmp_path / "mirror"
    base = root / "acme--base"
    shutil.copytree(tiny_model_dir, base)
    (base / "chat_template.jinja").write_text(templates.GOOD, encoding="utf-8")
    fine_tune = root / "acme--base-ft"
    fine_tune.mkdir()
    for item in base.iterdir():
        (fine_tune / item.name).symlink_to(item)
    other = root / "acme--other"
    shutil.copytree(tiny_model_dir, other)
    (other / "chat_template.jinja").write_text(templates.MULTILINE_EMPTY_THINK, encoding="utf-8")
    return root


def options_for(mirror: Path, out: Path, store: Path | None, **changes) -> MatrixOptions:
    settings = dict(out_dir=out, mirrors=[mirror], allow_hub=False, count=6, jobs=1, results_cache=store)
    settings.update(changes)
    return MatrixOptions(**settings)


def run(models, options):
    result = run_matrix(models, options)
    write_matrix(result.rows, options.out_dir, options.settings_record(sorted(models)))
    return result


def stable_files(out: Path) -> dict[str, object]:
    """Every output file, with timestamps and durations taken out (JSON and CSV parsed; the rest as text)."""
    import pandas as pd

    files: dict[str, object] = {}
    for path in sorted(out.rglob("*")):
        name = path.relative_to(out).as_posix()
        if path.is_dir() or path.suffix == ".parquet":
            continue
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            if isinstance(data, dict):
                data = {k: v for k, v in data.items() if k not in VOLATILE_KEYS}
            elif isinstance(data, list):
                data = [{k: v for k, v in row.items() if k not in VOLATILE_COLUMNS} for row in data]
            files[name] = data
        elif path.suffix == ".csv":
            table = pd.read_csv(path, keep_default_na=False).drop(columns=list(VOLATILE_COLUMNS))
            files[name] = table.to_dict(orient="records")
        elif path.suffix == ".html":
            files[name] = [line for line in path.read_text().splitlines() if "generated_at" not in line]
        else:
            files[name] = path.read_text()
    return files


def mtimes(out: Path) -> dict[str, int]:
    return {p.relative_to(out).as_posix(): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


def test_identical_pairs_are_audited_once(mirror, tmp_path):
    result = run([BASE, FINE_TUNE, OTHER], options_for(mirror, tmp_path / "out", None))
    assert (result.model_ids, result.pairs, result.audited) == (3, 2, 2)
    rows = {row["model_id"]: row for row in result.rows}
    assert rows[FINE_TUNE]["same_as"] == BASE and rows[BASE]["same_as"] == "" and rows[OTHER]["same_as"] == ""
    assert rows[FINE_TUNE]["verdict"] == rows[BASE]["verdict"] == "ready"
    assert rows[OTHER]["verdict"] == "broken"
    assert rows[FINE_TUNE]["report"] == rows[BASE]["report"] == "models/acme--base.md"
    assert rows[FINE_TUNE]["location"].endswith("acme--base-ft")
    assert sorted(p.name for p in (tmp_path / "out" / "models").iterdir()) == [
        "acme--base.html",
        "acme--base.json",
        "acme--base.md",
        "acme--other.html",
        "acme--other.json",
        "acme--other.md",
    ]
    assert "same as acme/base" in (tmp_path / "out" / "matrix.md").read_text()


def test_the_representative_report_does_not_depend_on_which_id_was_audited(mirror, tmp_path):
    """The fine-tune alone is audited under its own id; a later run that also lists the base publishes the base's
    report from the stored result exactly as a fresh audit of the base writes it."""
    store = tmp_path / "store"
    first = run([FINE_TUNE], options_for(mirror, tmp_path / "first", store))
    assert first.audited == 1
    warm = run([BASE, FINE_TUNE], options_for(mirror, tmp_path / "warm", store))
    assert warm.audited == 0
    cold = run([BASE, FINE_TUNE], options_for(mirror, tmp_path / "cold", None))
    assert cold.audited == 1
    assert stable_files(tmp_path / "warm") == stable_files(tmp_path / "cold")
    report = json.loads((tmp_path / "warm" / "models" / "acme--base.json").read_text())
    assert report["model"]["model_id"] == BASE and report["model"]["path"].endswith("acme--base")


def _edit_byte(path: Path) -> None:
    path.write_text(path.read_text(encoding="utf-8") + " ", encoding="utf-8")


@pytest.mark.parametrize("change", ["template byte", "tokenizer byte", "setting", "tool version"])
def test_any_key_change_misses_and_nothing_else_does(mirror, tmp_path, monkeypatch, change):
    store = tmp_path / "store"
    first = run([BASE, OTHER], options_for(mirror, tmp_path / "a", store))
    assert first.audited == 2 and first.store.written == 2
    again = run([BASE, OTHER], options_for(mirror, tmp_path / "b", store))
    assert again.audited == 0 and again.store.hits == 2
    changes = {}
    if change == "template byte":
        _edit_byte(mirror / "acme--other" / "chat_template.jinja")
    elif change == "tokenizer byte":
        _edit_byte(mirror / "acme--other" / "tokenizer_config.json")
    elif change == "setting":
        changes = {"seed": 1}
    else:
        monkeypatch.setattr(results_cache, "tool_fingerprint", lambda: "0.0.0+changed")
    after = run([BASE, OTHER], options_for(mirror, tmp_path / "c", store, **changes))
    expected = 1 if change.endswith("byte") else 2
    assert after.audited == expected


def test_a_corrupt_entry_is_recomputed(mirror, tmp_path):
    store = tmp_path / "store"
    run([BASE], options_for(mirror, tmp_path / "a", store))
    (entry,) = [p for p in store.rglob("*.json")]
    text = entry.read_text()
    entry.write_text(text.replace('"verdict":"ready"', '"verdict":"broken"', 1))
    again = run([BASE], options_for(mirror, tmp_path / "b", store))
    assert again.store.corrupt == 1 and again.audited == 1
    assert again.rows[0]["verdict"] == "ready"
    entry.write_text("{ not json")
    third = run([BASE], options_for(mirror, tmp_path / "c", store))
    assert third.store.corrupt == 1 and third.audited == 1
    assert stable_files(tmp_path / "a") == stable_files(tmp_path / "c")


def test_an_interrupted_run_resumes_to_the_same_output(mirror, tmp_path, monkeypatch):
    store = tmp_path / "store"
    models = [BASE, FINE_TUNE, OTHER]
    real_audit = matrix_backends.audit_pair
    calls = []

    def interrupted(model_id, options, events=None):
        calls.append(model_id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_audit(model_id, options, events)

    monkeypatch.setattr(matrix_backends, "audit_pair", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(models, options_for(mirror, tmp_path / "out", store))
    monkeypatch.setattr(matrix_backends, "audit_pair", real_audit)
    resumed = run(models, options_for(mirror, tmp_path / "out", store))
    assert resumed.audited == 1, "the pair finished before the interruption is kept"
    uninterrupted = run(models, options_for(mirror, tmp_path / "fresh", None))
    assert stable_files(tmp_path / "out") == stable_files(tmp_path / "fresh")
    assert uninterrupted.audited == 2


@pytest.mark.parametrize("store_kind", ["warm", "cold"])
def test_an_unchanged_rerun_rewrites_no_file(mirror, tmp_path, store_kind):
    store = tmp_path / "store" if store_kind == "warm" else None
    out = tmp_path / "out"
    run([BASE, FINE_TUNE, OTHER], options_for(mirror, out, store))
    before = mtimes(out)
    run([BASE, FINE_TUNE, OTHER], options_for(mirror, out, store))
    assert mtimes(out) == before


def test_matrix_json_keeps_integers(mirror, tmp_path):
    out = tmp_path / "out"
    run([BASE, "acme/missing"], options_for(mirror, out, None))
    rows = {row["model_id"]: row for row in json.loads((out / "matrix.json").read_text())}
    assert rows[BASE]["seed"] == 0 and isinstance(rows[BASE]["seed"], int)
    assert rows[BASE]["count"] == 6 and isinstance(rows[BASE]["count"], int)
    assert rows["acme/missing"]["seed"] is None


def test_ray_backend_gives_the_local_output(mirror, tmp_path, monkeypatch):
    """The backend starts its own local Ray instance, as ``matrix --backend ray`` does: one worker process, since
    starting a worker (Python, then transformers) is most of the cost; results arriving out of order are the
    worker pool's test (tests/test_matrix.py). Ray runs its workers at niceness 15, which on a busy machine starves
    them (49 s for two tiny audits with both cores busy, 2.4 s at 0); this test asks for 0, like the suite's other
    processes.
    """
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e .[dev] or .[ray])")
    monkeypatch.setenv("RAY_AUTH_MODE", os.environ.get("RAY_AUTH_MODE", "disabled"))
    monkeypatch.setenv("RAY_worker_niceness", "0")
    try:
        on_ray = run(
            [BASE, FINE_TUNE, OTHER], options_for(mirror, tmp_path / "ray", tmp_path / "store", backend="ray", jobs=1)
        )
    except BadInputError as exc:
        if "Ray did not start" not in str(exc):
            raise
        pytest.skip(f"a local Ray instance cannot start here (no shared memory, no free ports, ...): {exc}")
    finally:
        ray.shutdown()
    run([BASE, FINE_TUNE, OTHER], options_for(mirror, tmp_path / "local", None))
    assert on_ray.audited == 2
    assert stable_files(tmp_path / "ray") == stable_files(tmp_path / "local")


class FakeHub:
    """Stands in for ``HfApi``: records the query, answers with fixed ids or fails like a dead network."""

    def __init__(self, ids=(), error: Exception | None = None) -> None:
        self.ids, self.error, self.query = list(ids), error, None

    def list_models(self, **query):
        self.query = query
        if self.error is not None:
            raise self.error
        return [type("Info", (), {"id": model_id})() for model_id in self.ids]


def test_hub_filter_is_parsed_and_passed_on(monkeypatch):
    from tito_audit.matrix.hub_listing import list_hub_models, parse_filter

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub = FakeHub(["acme/a", "acme/b"])
    ids = list_hub_models(parse_filter("author=acme, tag=transformers,tag=en,sort=likes,limit=2"), api=hub)
    assert ids == ["acme/a", "acme/b"]
    assert hub.query == {
        "filter": ["conversational", "transformers", "en"],
        "author": "acme",
        "search": None,
        "sort": "likes",
        "limit": 2,
    }


@pytest.mark.parametrize("text", ["author", "limit=0", "limit=x", "sort=random", "colour=red"])
def test_bad_hub_filters_are_refused(text):
    from tito_audit.errors import BadInputError
    from tito_audit.matrix.hub_listing import parse_filter

    with pytest.raises(BadInputError):
        parse_filter(text)


def test_hub_listing_offline_or_unreachable_is_one_clear_error(monkeypatch):
    from tito_audit.errors import ResolutionError
    from tito_audit.matrix.hub_listing import list_hub_models, parse_filter

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ResolutionError, match="HF_HUB_OFFLINE"):
        list_hub_models(parse_filter("author=acme"), api=FakeHub())
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(ResolutionError, match=r"not reachable.*ConnectionError"):
        list_hub_models(parse_filter("author=acme"), api=FakeHub(error=ConnectionError("no route\nmore")))


def test_matrix_cli_dedupes_stores_and_refuses_offline_hub_listing(mirror, tmp_path):
    import subprocess
    import sys

    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "200", "TOKENIZERS_PARALLELISM": "false"}
    base = [sys.executable, "-m", "tito_audit.cli", "matrix", "--mirror", str(mirror), "--no-hub", "-n", "6", "-j", "1"]
    store = ["--results-cache", str(tmp_path / "store"), "--out", str(tmp_path / "out")]
    first = subprocess.run([*base, *store, BASE, FINE_TUNE], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "1 distinct template/tokenizer pairs, 1 audited in this run, 0 from stored results" in first.stdout
    second = subprocess.run([*base, *store, BASE, FINE_TUNE], capture_output=True, text=True, env=env, timeout=300)
    assert "0 audited in this run, 1 from stored results" in second.stdout
    offline = subprocess.run([*base, *store, "--from-hub", "author=acme"], capture_output=True, text=True, env=env)
    assert offline.returncode == 2 and "Traceback" not in offline.stderr
    assert len(offline.stderr.strip().splitlines()) == 1 and "HF_HUB_OFFLINE" in offline.stderr


def test_the_longest_audits_of_the_last_run_start_first(tmp_path):
    """Workers take the audits the last run found longest first, those it never timed before them all, so that no long
    audit starts last on two cores; ties keep the sorted order."""
    from tito_audit.matrix.run import longest_first

    out = tmp_path / "out"
    out.mkdir()
    rows = [
        {"model_id": "a/short", "duration_seconds": 2.0},
        {"model_id": "b/long", "duration_seconds": 90.0},
        {"model_id": "c/failed", "duration_seconds": None},
        {"model_id": "d/middle", "duration_seconds": 30.0},
    ]
    (out / "matrix.json").write_text(json.dumps(rows))
    ids = ["a/short", "b/long", "c/failed", "d/middle", "e/new", "f/new"]
    options = options_for(tmp_path, out, None)
    assert longest_first(ids, options) == ["c/failed", "e/new", "f/new", "b/long", "d/middle", "a/short"]
    assert longest_first(ids, options_for(tmp_path, tmp_path / "nothing-here", None)) == ids
