"""The README's pictures and figures describe the published matrix in ``reports/``.

``make screenshots`` (docs/screenshots.py) writes beside the pictures the figures they show (docs/screenshots.json:
the front page's counts, each model page's verdicts and the reason under them), read from ``reports/`` when they
were taken; the README states how many models ``make matrix`` audits and how many again with real trajectories.
After a republish that moves any of them, these tests fail until the pictures are taken again (``make
screenshots``, headless Chromium) and the README's figures are updated.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
SIDECAR = ROOT / "docs" / "screenshots.json"


def _screenshots_module():
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "docs" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_matrix_picture_records_what_it_shows():
    screenshots = _screenshots_module()
    recorded = json.loads(SIDECAR.read_text(encoding="utf-8"))
    assert set(recorded) == set(screenshots.SHOTS), "a picture of the matrix without its figures, or figures alone"
    assert all((ROOT / "docs" / name).is_file() for name in recorded)


def test_the_screenshots_show_the_published_matrix():
    screenshots = _screenshots_module()
    recorded = json.loads(SIDECAR.read_text(encoding="utf-8"))
    broken, ready = recorded["model-broken.png"]["model"], recorded["model-ready.png"]["model"]
    published = screenshots.figures(REPORTS, broken, ready)
    stale = {name: {"picture": recorded[name], "reports/": figures} for name, figures in published.items()}
    stale = {name: both for name, both in stale.items() if both["picture"] != both["reports/"]}
    assert not stale, (
        "docs/*.png show another matrix than reports/: run `make screenshots` (headless Chromium) after the "
        f"republish; differing: {json.dumps(stale, indent=1)}"
    )


def test_the_readmes_figures_are_the_published_matrix():
    rows = json.loads((REPORTS / "matrix.json").read_text(encoding="utf-8"))
    audited = [row for row in rows if row["status"] == "audited"]
    with_real_data = [row for row in audited if not str(row.get("verdict_with_real_data") or "n/a").startswith("n/a")]
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"audits (\d+) models \((\d+) of them again with real trajectories", readme)
    assert said is not None, "the README no longer says how many models make matrix audits"
    assert (int(said.group(1)), int(said.group(2))) == (len(audited), len(with_real_data))
