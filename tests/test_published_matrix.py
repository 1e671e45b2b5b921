"""The matrix committed in reports/ is what the current code produces from ../shared (same settings), so the published
matrix can never go stale. Regenerate it with `make matrix`.

Re-auditing every row inside the suite takes minutes, so the claim is checked in three parts that together leave no
row unchecked:

- **every row by its results key**: each audited row records the key its result is stored under (the sha256 of every
  file the audit read, the settings, the real-conversation sources, the library versions and the digest of the code
  that decides a result: :func:`tito_audit.matrix.store.pair_key`). The key is computed again from ../shared and the
  code as they are now (resolving and hashing, no audit) and must be the published one; a row that could not be
  audited must still be one;
- **a seeded sample audited again**: the audit is deterministic (tests/test_shared_models.py), so rows whose key
  holds are the rows the code makes; a few of them, drawn anew for each code digest, are audited again from scratch
  and must give the published row, report, page and way out byte for byte (a key that holds over forged pages does
  not pass);
- **the tables rendered again** from the published rows: matrix.md and index.html.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.conftest import requires_shared
from tito_audit.matrix.row import AUDITED, VOLATILE_COLUMNS
from tito_audit.matrix.run import MatrixOptions, run_matrix
from tito_audit.matrix.store import tool_fingerprint
from tito_audit.matrix.tables import to_html, to_markdown
from tito_audit.matrix.tasks import identify_many
from tito_audit.model.registry import registry_model_ids

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
STALE = "reports/ is stale: run `make matrix` and commit reports/"
SAMPLE = 3
FAST_SECONDS = 10.0
"""Only rows whose audit took at most this long are drawn: the suite stays fast."""

pytestmark = [
    requires_shared,
    pytest.mark.shared,
    pytest.mark.skipif(not (REPORTS / "matrix_settings.json").is_file(), reason="no published matrix in reports/"),
]


def _settings() -> dict:
    return json.loads((REPORTS / "matrix_settings.json").read_text(encoding="utf-8"))


def _rows() -> list[dict]:
    return json.loads((REPORTS / "matrix.json").read_text(encoding="utf-8"))


def _options(settings: dict, out_dir: Path) -> MatrixOptions:
    return MatrixOptions(
        out_dir=out_dir,
        mirrors=[Path(m) for m in settings["mirrors"]],
        allow_hub=False,
        seed=settings["seed"],
        count=settings["count"],
        max_turns=settings["max_turns"],
        jobs=1,
        conversation_sources=settings.get("conversations", []),
        conversations_limit=settings.get("conversations_limit"),
        parser=settings.get("parser", "template"),
    )


def _models(settings: dict) -> list[str]:
    return registry_model_ids() if settings["models"] == "registry" else settings["models"]


def _report(path: Path) -> dict:
    """A JSON report without the two fields that differ between runs (when it was made, and how long it took)."""
    report = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in report.items() if k not in ("generated_at", "duration_seconds")}


def _stable(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in VOLATILE_COLUMNS}


def test_every_published_row_holds_the_results_key_of_the_current_inputs_and_code(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # mirrors are recorded as given, relative to the project
    settings = _settings()
    published = {row["model_id"]: row for row in _rows()}
    identities = identify_many(_models(settings), _options(settings, tmp_path))
    assert len(identities) == len(published), STALE
    for identity in identities:
        row = published.get(identity.resolved_id or identity.model_id) or published.get(identity.model_id)
        assert row is not None, f"{STALE} ({identity.model_id} has no row)"
        if identity.key is None:
            assert row["status"] != AUDITED, f"{STALE} ({identity.model_id} is no longer reachable)"
            continue
        assert row["results_key"] == identity.key.digest, (
            f"{STALE} ({identity.model_id}: its files, settings or the code that audits it changed; code "
            f"{tool_fingerprint()})"
        )


def test_a_sample_of_rows_audited_again_gives_the_published_rows_and_pages(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    settings = _settings()
    rows = _rows()
    candidates = sorted(
        row["model_id"]
        for row in rows
        if row["status"] == AUDITED and not row.get("same_as") and (row.get("duration_seconds") or 0) <= FAST_SECONDS
    )
    sample = random.Random(tool_fingerprint()).sample(candidates, min(SAMPLE, len(candidates)))
    fresh = {row["model_id"]: row for row in run_matrix(sample, _options(settings, tmp_path)).rows}
    published = {row["model_id"]: row for row in rows}
    for model_id in sample:
        assert _stable(fresh[model_id]) == _stable(published[model_id]), f"{STALE} ({model_id})"
        stem = Path(published[model_id]["report"]).stem
        for suffix in (".md", ".html"):
            made = (tmp_path / "models" / f"{stem}{suffix}").read_text(encoding="utf-8")
            assert made == (REPORTS / "models" / f"{stem}{suffix}").read_text(encoding="utf-8"), (model_id, suffix)
        made_json, published_json = (_report(folder / "models" / f"{stem}.json") for folder in (tmp_path, REPORTS))
        assert made_json == published_json, (model_id, ".json")
        if published[model_id].get("fix_report"):
            fix = Path(published[model_id]["fix_report"])
            for name in (fix.name, fix.with_suffix(".diff").name):
                if (REPORTS / "fixes" / name).is_file():
                    made = (tmp_path / "fixes" / name).read_text(encoding="utf-8")
                    assert made == (REPORTS / "fixes" / name).read_text(encoding="utf-8"), (model_id, name)


def test_the_tables_render_again_from_the_published_rows():
    settings, rows = _settings(), _rows()
    assert to_markdown(rows, settings) == (REPORTS / "matrix.md").read_text(encoding="utf-8"), STALE
    assert to_html(rows, settings) == (REPORTS / "index.html").read_text(encoding="utf-8"), STALE
    pages = {Path(row["report"]).stem for row in rows if row.get("report") and not row.get("same_as")}
    assert {p.stem for p in (REPORTS / "models").glob("*.md")} == pages, STALE
    fixes = {Path(row["fix_report"]).name for row in rows if row.get("fix_report") and not row.get("same_as")}
    assert {p.name for p in (REPORTS / "fixes").glob("*.md")} == fixes, STALE
