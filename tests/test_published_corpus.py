"""The corpus matrix committed in reports/corpus/ is what the current code produces from ../shared, without
re-auditing all of it in the suite: every published row is checked by digest against the corpus as it is now (the
index's sha256, each template's sha256, the vocabulary it was audited with, the entries that could not be), and a
seeded sample of rows is audited again and must give the published rows and pages byte for byte. Regenerate it
with `make corpus`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.conftest import SHARED, requires_shared
from tito_audit.matrix.corpus import MISSING, SHA_MISMATCH, read_corpus
from tito_audit.matrix.corpus_run import run_corpus
from tito_audit.matrix.matrix_options import MatrixOptions

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "reports" / "corpus"
SAMPLE = 3
SEED = 27
FAST_SECONDS = 3.0
"""Only rows whose audit took at most this long are sampled: the suite stays fast."""
STALE = "reports/corpus is stale: run `make corpus` and commit reports/corpus"

pytestmark = [requires_shared, pytest.mark.shared]


@pytest.fixture(scope="module")
def published() -> tuple[dict, list[dict]]:
    if not (PUBLISHED / "index.json").is_file() or not (SHARED / "template-corpus" / "index.json").is_file():
        pytest.skip("reports/corpus is not published yet (or ../shared/template-corpus is absent): run `make corpus`")
    settings = json.loads((PUBLISHED / "settings.json").read_text(encoding="utf-8"))
    return settings, json.loads((PUBLISHED / "index.json").read_text(encoding="utf-8"))


def test_every_published_corpus_row_matches_the_corpus_by_digest(published, monkeypatch):
    settings, rows = published
    monkeypatch.chdir(ROOT)  # the corpus and mirrors are recorded as given, relative to the project
    corpus = read_corpus(Path(settings["corpus"]), [Path(m) for m in settings["mirrors"]])
    assert corpus.index_sha256 == settings["corpus_index_sha256"], STALE
    now = {entry.name: (entry.sha256, entry.tokenizer_id, entry.status) for entry in corpus.entries}
    then = {
        row["name"]: (
            row["sha256"],
            row["tokenizer"],
            row["status"] if row["status"] in (MISSING, SHA_MISMATCH) else "",
        )
        for row in rows
    }
    assert then == now, STALE
    lookup = json.loads((PUBLISHED / "lookup.js").read_text(encoding="utf-8").removeprefix("window.CORPUS = ")[:-2])
    position = {row["name"]: i for i, row in enumerate(rows)}
    for entry in corpus.entries:  # every hub id that ships a template, and its sha256, find that template's row
        for model_id in [*entry.model_ids, entry.sha256]:
            assert lookup["ids"][model_id.lower()] == position[entry.name], (model_id, STALE)
    pages = {row["page"] for row in rows if row["page"]}
    assert pages == {f"templates/{p.name}" for p in (PUBLISHED / "templates").glob("*.html")}, STALE


def test_a_seeded_sample_of_the_corpus_audits_again_to_the_published_rows(published, tmp_path, monkeypatch):
    settings, rows = published
    monkeypatch.chdir(ROOT)
    fast = [row for row in rows if row["status"] == "audited" and (row["duration_seconds"] or 0) <= FAST_SECONDS]
    chosen = {row["name"] for row in random.Random(SEED).sample(fast, min(SAMPLE, len(fast)))}
    corpus = Path(settings["corpus"])
    sample = tmp_path / "corpus"
    (sample / "templates").mkdir(parents=True)
    entries = [e for e in json.loads((corpus / "index.json").read_text(encoding="utf-8")) if e["name"] in chosen]
    for entry in entries:
        name = f"{entry['name']}.jinja"
        (sample / "templates" / name).symlink_to((corpus / "templates" / name).resolve())
    (sample / "index.json").write_text(json.dumps(entries), encoding="utf-8")
    options = MatrixOptions(
        out_dir=tmp_path / "out",
        mirrors=[Path(m) for m in settings["mirrors"]],
        allow_hub=False,
        seed=settings["seed"],
        count=settings["count"],
        max_turns=settings["max_turns"],
        jobs=1,
        examples_per_group=settings["examples_per_group"],
        way_out_budget=settings["way_out_budget"],
    )
    fresh = run_corpus(sample, options, tmp_path / "stage", label=settings["corpus"]).rows
    by_name = {row["name"]: row for row in rows}
    assert len(fresh) == len(chosen)
    for row in fresh:
        assert {**row, "duration_seconds": None} == {**by_name[row["name"]], "duration_seconds": None}, STALE
        page = row["page"]
        assert (tmp_path / "out" / page).read_bytes() == (PUBLISHED / page).read_bytes(), f"{page}: {STALE}"
