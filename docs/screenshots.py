"""Screenshots for the README, taken in headless Chromium at a laptop's viewport: the published pages (the front
page and two model pages, one broken, one ready) and the documentation site (its home and the Getting-started
page, built with mkdocs into a temporary folder and served on 127.0.0.1). Run ``make screenshots`` after
``make matrix``.

Usage: python docs/screenshots.py [BROKEN_MODEL_ID] [READY_MODEL_ID]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REPORTS = ROOT / "reports"
SIDECAR = ROOT / "docs" / "screenshots.json"
# the ready page is a model ready as its template writes it and with both engines' parsers
BROKEN, READY = "Qwen/Qwen3-4B", "meta-llama/Llama-3.2-3B-Instruct"
SHOTS = {
    "front-page.png": ("index.html", 1400, 900),
    "model-broken.png": ("models/{broken}.html", 1400, 1000),
    "model-ready.png": ("models/{ready}.html", 1400, 1000),
}
DOC_SHOTS = {"docs-home.png": ("", 1400, 900), "docs-getting-started.png": ("getting-started/", 1400, 900)}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def figures(reports: Path, broken: str = BROKEN, ready: str = READY) -> dict[str, dict]:
    """What the matrix's screenshots show, read from ``reports``: per picture, the figures on it (the front page's
    counts; a model page's verdict, the reason under it, the verdict with each engine's parser, each variant's).
    """
    rows = json.loads((reports / "matrix.json").read_text(encoding="utf-8"))
    verdicts: dict[str, int] = {}
    not_audited: dict[str, int] = {}
    for row in rows:
        if row["status"] == "audited":
            verdicts[row["verdict"]] = verdicts.get(row["verdict"], 0) + 1
        else:
            not_audited[row["status"]] = not_audited.get(row["status"], 0) + 1
    shown = {
        "front-page.png": {
            "models": len(rows),
            "verdicts": dict(sorted(verdicts.items())),
            "not audited": dict(sorted(not_audited.items())),
        }
    }
    for name, model in (("model-broken.png", broken), ("model-ready.png", ready)):
        report = json.loads((reports / "models" / f"{model.replace('/', '--', 1)}.json").read_text(encoding="utf-8"))
        worst = next((v for v in report["variants"] if v["verdict"] == report["verdict"]), None)
        shown[name] = {
            "model": model,
            "verdict": report["verdict"],
            "reason": worst["verdict_reason"] if worst is not None else "",
            "verdicts with the engines' parsers": {e["parser"]: e["verdict"] for e in report.get("parsers", [])},
            "variants": {variant["name"]: variant["verdict"] for variant in report["variants"]},
        }
    return shown


def docs_shots() -> int:
    """Build the docs site, serve it on 127.0.0.1 and take its screenshots."""
    from tests.browser import chromium, console_errors

    with tempfile.TemporaryDirectory() as tmp:
        built = subprocess.run(
            [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-q", "--site-dir", tmp],
            cwd=ROOT,
            check=False,
        )
        if built.returncode:
            return built.returncode
        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=tmp))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            for name, (page, width, height) in DOC_SHOTS.items():
                browser = chromium(width, height)
                try:
                    browser.get(f"http://127.0.0.1:{server.server_port}/{page}")
                    time.sleep(0.8)  # the theme's script and the search index settle
                    errors = console_errors(browser)
                    if errors:
                        print(f"{page or 'home'}: console errors: {errors[0]}", file=sys.stderr)
                        return 1
                    browser.save_screenshot(str(ROOT / "docs" / name))
                finally:
                    browser.quit()
                print(f"docs/{name} <- the docs site, /{page}")
        finally:
            server.shutdown()
    return 0


def main(broken: str = BROKEN, ready: str = READY) -> int:
    from tests.browser import chromium, console_errors

    stems = {"broken": broken.replace("/", "--", 1), "ready": ready.replace("/", "--", 1)}
    for name, (page, width, height) in SHOTS.items():
        path = REPORTS / page.format(**stems)
        if not path.is_file():
            print(f"{path}: not published (run `make matrix` first)", file=sys.stderr)
            return 2
        browser = chromium(width, height)
        try:
            browser.get(path.as_uri())
            time.sleep(0.3)  # fonts and the little script settle
            errors = console_errors(browser)
            if errors:
                print(f"{path}: console errors: {errors[0]}", file=sys.stderr)
                return 1
            browser.save_screenshot(str(ROOT / "docs" / name))
        finally:
            browser.quit()
        print(f"docs/{name} <- reports/{page.format(**stems)}")
    SIDECAR.write_text(json.dumps(figures(REPORTS, broken, ready), indent=1, ensure_ascii=False) + "\n", "utf-8")
    print(f"docs/{SIDECAR.name} <- the figures they show")
    return docs_shots()


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
