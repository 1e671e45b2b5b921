"""Screenshots for the README, taken in headless Chromium at a laptop's viewport: the published pages (the front
page and two model pages, one broken, one ready) and the documentation site (its home and the Getting-started
page, built with mkdocs into a temporary folder and served on 127.0.0.1). Run ``make screenshots`` after
``make matrix``.

Usage: python docs/screenshots.py [BROKEN_MODEL_ID] [READY_MODEL_ID]
"""

from __future__ import annotations

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

from tests.browser import chromium, console_errors  # noqa: E402

REPORTS = ROOT / "reports"
SHOTS = {
    "front-page.png": ("index.html", 1400, 900),
    "model-broken.png": ("models/{broken}.html", 1400, 1000),
    "model-ready.png": ("models/{ready}.html", 1400, 1000),
}
DOC_SHOTS = {"docs-home.png": ("", 1400, 900), "docs-getting-started.png": ("getting-started/", 1400, 900)}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def docs_shots() -> int:
    """Build the docs site, serve it on 127.0.0.1 and take its screenshots."""
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


def main(broken: str = "Qwen/Qwen3-4B", ready: str = "Qwen/Qwen3-4B-Instruct-2507") -> int:
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
    return docs_shots()


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
