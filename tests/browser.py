"""Headless Debian Chromium through selenium for the page tests (skipped, with the reason, when either is
missing; ``.ci/run`` installs both)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--force-device-scale-factor=1",
)


def chromium(width: int = 1400, height: int = 900) -> Any:
    """A headless Chromium whose viewport is ``width`` × ``height`` CSS pixels, logging the console."""
    selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install -e .[dev])")
    del selenium
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("Debian chromium and chromium-driver are not installed (.ci/run installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(driver), options=options)
    set_viewport(browser, width, height)
    return browser


def set_viewport(browser: Any, width: int, height: int) -> None:
    """Size the window so that the page itself (``innerWidth`` × ``innerHeight``) is ``width`` × ``height``."""
    browser.set_window_size(width, height)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(2 * width - inner[0], 2 * height - inner[1])


def console_errors(browser: Any) -> list[str]:
    """Console messages of level SEVERE since the last call (JavaScript errors, failed loads)."""
    return [entry["message"] for entry in browser.get_log("browser") if entry.get("level") == "SEVERE"]
