"""The matrix over small synthetic models: rows, output formats, failure isolation, reproducibility (its HTML
pages: tests/test_site.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests import templates
from tito_audit.matrix.row import AUDITED, FAILED_TO_LOAD, NOT_REACHABLE, VOLATILE_COLUMNS
from tito_audit.matrix.run import MatrixOptions, run_matrix
from tito_audit.matrix.tables import write_matrix

MODELS = ["acme/ready", "acme/broken", "acme/oneline", "acme/corrupt", "acme/template-only", "acme/missing"]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory, tiny_model_dir) -> Path:
    root = tmp_path_factory.mktemp("mirror")
    for name, source in (
        ("ready", templates.GOOD),
        ("broken", templates.MULTILINE_EMPTY_THINK),
        ("oneline", templates.EMPTY_THINK_ONLY_WHEN_LAST),
    ):
        folder = root / f"acme--{name}"
        shutil.copytree(tiny_model_dir, folder)
        (folder / "chat_template.jinja").write_text(source, encoding="utf-8")
    corrupt = root / "acme--corrupt"
    shutil.copytree(tiny_model_dir, corrupt)
    (corrupt / "tokenizer.json").write_text('{"truncated": ', encoding="utf-8")
    (corrupt / "chat_template.jinja").write_text(templates.GOOD, encoding="utf-8")
    template_only = root / "acme--template-only"
    template_only.mkdir()
    (template_only / "chat_template.jinja").write_text(templates.GOOD, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def matrix(mirror, tmp_path_factory):
    out = tmp_path_factory.mktemp("matrix")
    options = MatrixOptions(out_dir=out, mirrors=[mirror], allow_hub=False, count=8, jobs=2)
    rows = run_matrix(MODELS, options).rows
    write_matrix(rows, out, {"seed": 0, "count": 8})
    return out, rows


def by_model(rows):
    return {row["model_id"]: row for row in rows}


def test_rows_and_verdicts(matrix):
    _, rows = matrix
    rows = by_model(rows)
    assert list(rows) == sorted(MODELS, key=str.lower)
    assert rows["acme/ready"]["status"] == AUDITED and rows["acme/ready"]["verdict"] == "ready"
    assert rows["acme/ready"]["rollout_tool"] == "stable" and rows["acme/ready"]["audit_level"] == "full"
    assert rows["acme/broken"]["verdict"] == "broken"
    assert "empty-think-dropped" in rows["acme/broken"]["main_causes"]
    assert rows["acme/broken"]["rollout_tool"] == "unstable"
    assert rows["acme/template-only"]["audit_level"] == "text-level only"
    assert rows["acme/template-only"]["roundtrip_findings"] == "n/a (text level)"


def test_failures_are_isolated_in_their_rows(matrix):
    _, rows = matrix
    rows = by_model(rows)
    assert (
        rows["acme/corrupt"]["status"] == FAILED_TO_LOAD and "cannot load tokenizer" in rows["acme/corrupt"]["reason"]
    )
    assert rows["acme/missing"]["status"] == NOT_REACHABLE and "not found" in rows["acme/missing"]["reason"]
    assert not rows["acme/missing"]["verdict"]


def test_rows_record_provenance(matrix):
    _, rows = matrix
    row = by_model(rows)["acme/ready"]
    assert len(row["tokenizer_sha256"]) == 64 and len(row["template_sha256"]) == 64
    assert row["seed"] == 0 and row["count"] == 8
    assert row["tool_version"] and "transformers" in row["library_versions"]
    assert row["location"].endswith("acme--ready") and row["source"] == "mirror"


def test_output_files(matrix):
    out, rows = matrix
    import pandas as pd
    from datasets import Dataset

    assert len(pd.read_csv(out / "matrix.csv")) == len(MODELS)
    assert [r["model_id"] for r in json.loads((out / "matrix.json").read_text())] == [r["model_id"] for r in rows]
    parquet = Dataset.from_parquet(str(out / "matrix.parquet"))
    assert parquet.num_rows == len(MODELS) and "verdict" in parquet.column_names
    markdown = (out / "matrix.md").read_text()
    for model in MODELS:
        assert model in markdown
    assert "[report](models/acme--ready.md)" in markdown
    assert (out / "models" / "acme--ready.json").is_file() and (out / "models" / "acme--broken.md").is_file()
    assert not (out / "models" / "acme--missing.json").exists()
    assert json.loads((out / "models" / "acme--ready.json").read_text())["verdict"] == "ready"


def test_same_rows_in_one_process_and_in_workers(matrix, mirror, tmp_path):
    _, rows = matrix
    again = run_matrix(MODELS, MatrixOptions(out_dir=tmp_path, mirrors=[mirror], allow_hub=False, count=8, jobs=1)).rows

    def stable(row):
        return {k: v for k, v in row.items() if k not in VOLATILE_COLUMNS}

    assert [stable(r) for r in again] == [stable(r) for r in rows]


def test_broken_rows_get_a_verified_way_out_page(matrix):
    out, rows = matrix
    rows = by_model(rows)
    broken = rows["acme/broken"]
    # MULTILINE_EMPTY_THINK renders the empty think block only for the last turn: as-sampled fixes it
    assert broken["way_out"].startswith("fix (1 line): keep the empty think block") and broken["way_out"].endswith(
        "→ ready"
    )
    assert broken["fix_report"] == "fixes/acme--broken.md"
    page = (out / broken["fix_report"]).read_text()
    assert "no-change proof holds" in page and "| `default` | broken | ready |" in page
    diff = (out / "fixes" / "acme--broken.diff").read_text()
    # the edit as a person would write it: the branch that tested loop.last is the else now (constants folded)
    assert "-" in diff and "+" in diff and "+{%- else %}" in diff and "true" not in diff
    assert rows["acme/ready"]["way_out"] == "" and not (out / "fixes" / "acme--ready.md").exists()
    assert "[fix (1 line)" in (out / "matrix.md").read_text()
    # a template written on one line: the fix is offered, its diff (the whole template) is not published
    assert rows["acme/oneline"]["way_out"].startswith("fix (1 line)")
    assert not (out / "fixes" / "acme--oneline.diff").exists()
    assert "The diff is not published" in (out / "fixes" / "acme--oneline.md").read_text()
    # the way out in its training form: its own file, generation blocks around what the model samples, verified
    assert "## Training form" in page and "assistant_only_loss=True" in page and "byte-identically" in page
    training = (out / "fixes" / "acme--broken.training.diff").read_text()
    assert "+++ b/chat_template.training.jinja" in training and "{%- generation -%}" in training
    assert rows["acme/broken"]["mask"] == rows["acme/ready"]["mask"] == "n/a"  # neither template has blocks


def test_pages_of_models_no_longer_in_the_matrix_are_removed(mirror, tmp_path):
    for folder, suffixes in (("fixes", (".md", ".diff", ".training.diff")), ("models", (".md", ".json", ".html"))):
        (tmp_path / folder).mkdir()
        for suffix in suffixes:
            (tmp_path / folder / f"gone--model{suffix}").write_text("old", encoding="utf-8")
    rows = run_matrix(["acme/broken"], MatrixOptions(out_dir=tmp_path, mirrors=[mirror], allow_hub=False, count=8)).rows
    assert rows[0]["fix_report"] == "fixes/acme--broken.md"
    # the way out's training form comes with it (its diff from the model's own template); a gone model's goes
    assert sorted(p.name for p in (tmp_path / "fixes").iterdir()) == [
        "acme--broken.diff",
        "acme--broken.md",
        "acme--broken.training.diff",
    ]
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [
        "acme--broken.html",
        "acme--broken.json",
        "acme--broken.md",
    ]
