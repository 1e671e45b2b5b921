"""Scenario packs: seeded conversations shaped like the environments agentic RL trains on.

Each pack writes the observations its environment produces (grids with significant whitespace, shop
pages full of brackets and prices, shell output with CRLF and tabs, room descriptions that repeat) and
the actions its agents take, in two styles: actions as tool calls with observations as tool results,
and actions as plain assistant text with observations as user turns (RAGEN-style games).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterator

from tito_audit.conversations.conversation import Conversation, Message
from tito_audit.errors import BadInputError

DIRECTIONS = ("up", "down", "left", "right")


def _grid(rng: random.Random, width: int, height: int, cells: str, player: str) -> str:
    rows = [[rng.choice(cells) for _ in range(width)] for _ in range(height)]
    rows[rng.randrange(height)][rng.randrange(width)] = player
    return "\n".join("".join(row) for row in rows)


def _sokoban(rng: random.Random) -> str:
    inner = _grid(rng, 5, 4, "    .$", "@").splitlines()
    board = ["#" * 7, *(f"#{row}#" for row in inner), "#" * 7]
    return "\n".join(board) + f"\nBoxes on target: {rng.randint(0, 2)}/2"


def _frozen_lake(rng: random.Random) -> str:
    return _grid(rng, 4, 4, "FFFH", "P") + "\nThe ice is slippery: you may not move where you intended."


def _bandit(rng: random.Random) -> str:
    arm = rng.randint(1, 3)
    return f"You pulled arm {arm}.\nReward: {rng.choice([0, 0.25, 1.0])}\nTotal reward so far: {rng.uniform(0, 9):.2f}"


def _webshop(rng: random.Random) -> str:
    lines = ["[Back to Search]", f"Page {rng.randint(1, 5)} (Total results: {rng.randint(10, 90)})", "[Next >]"]
    for _ in range(rng.randint(2, 4)):
        asin = "B0" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(8))
        name = rng.choice(["Men's Running Shoes, Breathable", "Café Mug 12 oz — Ceramic", 'USB-C Cable 2m "Braided"'])
        lines += [f"[{asin}]", name, f"${rng.uniform(5, 120):.2f}"]
    return "\n".join(lines)


def _swe(rng: random.Random) -> str:
    return rng.choice(
        [
            "$ pytest -q\r\n..F\r\nE   assert 404 == 200\r\n1 failed, 2 passed in 0.3s\r\n",
            "AUTHORS.rst\t    LICENSE\t src/\r\nCHANGELOG.rst\t    tests/\r\n",
            '[File: src/app.py (3 lines total)]\n1:def main():\n2:    return os.environ.get("X", "/tmp")\n3:',
            "diff --git a/app.py b/app.py\n@@ -1,2 +1,2 @@\n-    return None\n+    return path\n",
            "",
        ]
    )


def _textworld(rng: random.Random) -> str:
    room = rng.choice(["Kitchen", "Bedroom", "Cellar"])
    items = rng.sample(["a knife", "an apple", "a rusty key", "a map"], 2)
    return f"-= {room} =-\nYou are in the {room.lower()}. You see {items[0]} and {items[1]}.\n\nExits: north, east."


SCENARIOS: dict[str, tuple[str, Callable[[random.Random], str], str, Callable[[random.Random], dict]]] = {
    "bandit": (
        "pull",
        _bandit,
        "You play a multi-armed bandit. Pull arms to maximise reward.",
        lambda r: {"arm": r.randint(1, 3)},
    ),
    "sokoban": (
        "move",
        _sokoban,
        "Push every box ($) onto a target (.). You are @.",
        lambda r: {"direction": r.choice(DIRECTIONS)},
    ),
    "frozenlake": (
        "move",
        _frozen_lake,
        "Reach the goal without falling into a hole (H).",
        lambda r: {"direction": r.choice(DIRECTIONS)},
    ),
    "webshop": (
        "click",
        _webshop,
        "Find and buy the product the user wants.",
        lambda r: {"element": r.choice(["[Next >]", "[Buy Now]", "[B09QKP7XQL]"])},
    ),
    "swe": (
        "bash",
        _swe,
        "You are a software engineer working in a repository shell.",
        lambda r: {"command": r.choice(["pytest -q", "ls -F", "cat src/app.py"])},
    ),
    "textworld": (
        "act",
        _textworld,
        "You are in a text adventure. Act to complete the quest.",
        lambda r: {"command": r.choice(["go north", "take key", "open door"])},
    ),
}
ALIASES = {"alfworld": "textworld", "frozen-lake": "frozenlake"}


def scenario_names() -> list[str]:
    return sorted(SCENARIOS)


def _tool(action: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": action,
            "description": f"Environment action '{action}'.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
        },
    }


def scenario_conversation(name: str, index: int, seed: int, max_turns: int = 6) -> Conversation:
    """Conversation ``index`` of scenario ``name``: tool-call style for even indices, text style for odd."""
    action, observe, system, arguments = SCENARIOS[name]
    rng = random.Random(f"scenario:{name}:{seed}:{index}")
    tool_style = index % 2 == 0
    messages: list[Message] = [{"role": "system", "content": system}, {"role": "user", "content": observe(rng)}]
    turns = rng.randint(2, max(2, max_turns))
    for turn in range(turns):
        thought = rng.choice(["", "I should try another direction.", "The box is stuck; back off."])
        if turn == turns - 1:
            messages.append({"role": "assistant", "content": rng.choice(["Done.", "<answer>finish</answer>"])})
            break
        args = arguments(rng)
        if tool_style:
            call_id = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(9))
            message: Message = {
                "role": "assistant",
                "content": thought,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": action, "arguments": args}}],
            }
            messages.append(message)
            messages.append({"role": "tool", "tool_call_id": call_id, "name": action, "content": observe(rng)})
        else:
            value = next(iter(args.values()))
            messages.append({"role": "assistant", "content": f"{thought}\n<answer>{value}</answer>".lstrip("\n")})
            messages.append({"role": "user", "content": observe(rng)})
    return Conversation(
        id=f"{name}{index:03d}",
        messages=messages,
        tools=[_tool(action)] if tool_style else None,
        shape={"scenario": name, "style": "tool" if tool_style else "text"},
        must_appear=[],
    )


def scenario_conversations(names: list[str], count: int, seed: int, max_turns: int = 6) -> Iterator[Conversation]:
    """``count`` conversations per scenario, in the order the names were given."""
    for raw in names:
        name = ALIASES.get(raw, raw)
        if name not in SCENARIOS:
            raise BadInputError(f"unknown scenario '{raw}' (known: {', '.join(scenario_names())})")
        for index in range(count):
            yield scenario_conversation(name, index, seed, max_turns)
