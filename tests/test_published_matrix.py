"""The matrix committed in reports/ is what the current code produces from ../shared (same settings),
so the published matrix can never go stale. Regenerate it with `make matrix`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import requires_shared
from tito_audit.matrix.row import VOLATILE_COLUMNS
from tito_audit.matrix.run import MatrixOptions, run_matrix
from tito_audit.matrix.tables import to_html, to_markdown
from tito_audit.model.registry import registry_model_ids

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"

pytestmark = [requires_shared, pytest.mark.shared]


def _stable(rows):
    return [{k: v for k, v in row.items() if k not in VOLATILE_COLUMNS} for row in rows]


@pytest.mark.skipif(not (REPORTS / "matrix_settings.json").is_file(), reason="no published matrix in reports/")
def test_published_matrix_is_current(tmp_path, monkeypatch):
    settings = json.loads((REPORTS / "matrix_settings.json").read_text())
    published = json.loads((REPORTS / "matrix.json").read_text())
    monkeypatch.chdir(ROOT)  # mirrors are recorded as given, relative to the project
    models = registry_model_ids() if settings["models"] == "registry" else settings["models"]
    options = MatrixOptions(
        out_dir=tmp_path,
        mirrors=[Path(m) for m in settings["mirrors"]],
        allow_hub=False,
        seed=settings["seed"],
        count=settings["count"],
        max_turns=settings["max_turns"],
        jobs=2,
        conversation_sources=settings.get("conversations", []),
        conversations_limit=settings.get("conversations_limit"),
        parser=settings.get("parser", "template"),
    )
    rows = run_matrix(models, options).rows
    assert _stable(rows) == _stable(published), "reports/ is stale: run `make matrix` and commit reports/"
    assert to_markdown(rows, settings) == (REPORTS / "matrix.md").read_text()
    for report in sorted((tmp_path / "models").glob("*.md")):
        assert report.read_text() == (REPORTS / "models" / report.name).read_text(), report.name
    # the HTML pages (they hold no timestamp or duration, so they are compared whole)
    assert to_html(rows, settings) == (REPORTS / "index.html").read_text(), "reports/index.html is stale"
    pages = sorted(p.name for p in (tmp_path / "models").glob("*.html"))
    assert pages == sorted(p.name for p in (REPORTS / "models").glob("*.html")), "reports/models/*.html is stale"
    for name in pages:
        assert (tmp_path / "models" / name).read_text() == (REPORTS / "models" / name).read_text(), name
    # the way out of every broken and ready-tool-only row: its page and, for a fix, its diff
    fresh = sorted(p.name for p in (tmp_path / "fixes").iterdir()) if (tmp_path / "fixes").is_dir() else []
    published = sorted(p.name for p in (REPORTS / "fixes").iterdir()) if (REPORTS / "fixes").is_dir() else []
    assert fresh == published, "reports/fixes/ is stale: run `make matrix` and commit reports/"
    for name in fresh:
        assert (tmp_path / "fixes" / name).read_text() == (REPORTS / "fixes" / name).read_text(), name
