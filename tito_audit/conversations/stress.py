"""Stress text: the whitespace, scripts and look-alike markup that break templates and tokenizers.

Environment observations come from agentic-RL practice: grid games (Sokoban, FrozenLake, Bandit),
web-shopping pages, software-engineering shell output and diffs, text-adventure rooms.
"""

from __future__ import annotations

import random

STRESS_TEXTS: dict[str, str] = {
    "leading-trailing-spaces": "   padded on both ends   ",
    "leading-newlines": "\n\nstarts after blank lines",
    "trailing-newlines": "ends with blank lines\n\n",
    "crlf": "first line\r\nsecond line\r\n",
    "tabs": "name\tqty\tprice\nwidget\t2\t9.99",
    "cjk": "東京の天気は晴れです。北京今天多云，气温二十度。",
    "emoji-zwj": "family 👨\u200d👩\u200d👧\u200d👦 and thumbs 👍🏽 done",
    "combining-marks": "cafe\u0301 nai\u0308ve Zoe\u0308 \u1e9b\u0323",
    "rtl": "مرحبا بالعالم — שלום עולם",
    "code-block": "```python\ndef area(r):\n    return 3.14159 * r ** 2  # ok\n```",
    "json-looking": '{"status": "ok", "items": [1, 2, 3], "next": null}',
    "long-line": " ".join(f"token{i}" for i in range(180)),
    "empty": "",
    "only-whitespace": " \n\t ",
    "markup-lookalike": "<think>not a real tag</think> and <tool_call> text",
}

CONTROL_LOOKALIKES = ("<|im_end|>", "<|eot_id|>", "</s>", "<|end|>", "<|im_start|>assistant", "<end_of_turn>")
"""Literal special-token strings that a user or tool might paste (role-injection probes)."""

SOKOBAN = "#######\n#  .  #\n# $@$ #\n#  .  #\n#######\nYou pushed a box. Boxes on target: 1/2."
FROZEN_LAKE = "SFFF\nFHFH\nFFFH\nHFFG\nYou are at (1, 0). The ice is slippery."
BANDIT = "You pulled arm 2 of 3.\nReward: 0.75\nTotal reward so far: 3.25"
WEBSHOP = (
    "[Back to Search]\nPage 1 (Total results: 50)\n[Next >]\n[B09QKP7XQL]\n"
    "Men's Running Shoes, Breathable Mesh — Size 10\n$39.99\n[B07Z8VV1K6]\nTrail Runner GTX\n$89.00"
)
SHELL = (
    "$ pytest -q tests/test_api.py\n..F.\n=================================== FAILURES ===\n"
    "    assert resp.status_code == 200\nE   assert 404 == 200\n1 failed, 3 passed in 0.41s"
)
FILE_VIEW = (
    "[File: /repo/src/app.py (120 lines total)]\n1:import os\n2:\n3:def main():\n"
    '4:    path = os.environ.get("APP_PATH", "/tmp")\n5:    return path'
)
DIFF = (
    "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n@@ -3,3 +3,4 @@\n"
    " def main():\n-    return None\n+    path = os.getcwd()\n+    return path\n"
)
ROOM = (
    "-= Kitchen =-\nYou are in a kitchen. You see a fridge, which is closed, and a counter.\n"
    "On the counter you see a knife and an apple.\nExits: north, east."
)
TICKET = (
    '{"ticket": 4812, "status": "pending", "assignee": null, "urgent": true, "labels": ["billing", "eu"],\n'
    ' "history": [{"at": "2026-01-14T17:02:11Z", "by": "ops-bot", "note": "escalated"}]}'
)
CLOCK = "2026-01-15T09:30:00+01:00 (Thursday)\nTime zone: Europe/Paris\nUptime: 3 days, 4:12:09"
OBSERVATIONS: dict[str, str] = {
    "sokoban": SOKOBAN,
    "frozen-lake": FROZEN_LAKE,
    "bandit": BANDIT,
    "webshop": WEBSHOP,
    "shell": SHELL,
    "file-view": FILE_VIEW,
    "diff": DIFF,
    "room": ROOM,
    "ticket": TICKET,
    "clock": CLOCK,
}

PHRASES = (
    "checking the forecast now",
    "the order was found",
    "three matching items",
    "the test suite ran",
    "moving the box left",
    "search results are ready",
    "the file has been opened",
    "no errors were reported",
    "the booking is confirmed",
    "the door is locked",
)
"""Plain ASCII phrases; every generated tool result carries one so dropped results can be detected."""


def stress_fragment(rng: random.Random) -> tuple[str, str]:
    name = rng.choice(sorted(STRESS_TEXTS))
    return name, STRESS_TEXTS[name]


def decorate(text: str, rng: random.Random, probability: float = 0.5) -> str:
    """Surround ``text`` with a stress fragment at a random side, some of the time."""
    if rng.random() >= probability:
        return text
    _, fragment = stress_fragment(rng)
    return fragment + text if rng.random() < 0.5 else text + fragment
