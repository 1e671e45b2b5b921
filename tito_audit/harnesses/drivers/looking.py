"""What every framework driver shares: the gateway, model and task from the environment, and the one tool the
drivers give their agent (a shell in the task folder), run by the framework as its own tool."""

from __future__ import annotations

import os
import subprocess

BASE_URL = os.environ["TITO_BASE_URL"]
"""The gateway's OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``)."""
MODEL = os.environ["TITO_MODEL"]
TASK = os.environ["TITO_TASK"]
INSTRUCTIONS = "You look around a folder with the tools you have, then answer."
HEADERS = {"X-Session-Id": os.environ["TITO_SESSION"]} if os.environ.get("TITO_SESSION") else {}
"""A session id, only in the configurations that send one (none by default)."""


def run_shell(command: str) -> str:
    """Run a shell command in the task folder and return what it printed."""
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=20, check=False)
    return (done.stdout + done.stderr)[-4000:] or f"(exit {done.returncode}, no output)"
