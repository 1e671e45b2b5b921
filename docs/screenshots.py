"""Screenshots of the published pages for the README: the front page and two model pages (one broken, one
ready), taken in headless Chromium at a laptop's viewport. Run ``make screenshots`` after ``make matrix``.

Usage: python docs/screenshots.py [BROKEN_MODEL_ID] [READY_MODEL_ID]
"""

from __future__ import annotations

import sys
import time
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
