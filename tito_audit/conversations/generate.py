"""Seeded generator of tool-calling conversations covering the shapes real rollouts hit.

Each conversation takes one cell of the cross product below; the first ``len(SHAPE_GRID)``
conversations of a seed visit every cell once (in a seeded order), later ones start the grid again.
Everything else (texts, number of turns, observations) is drawn from a generator seeded by
``(seed, index)``, so conversation *i* is the same whatever ``count`` is.
"""

from __future__ import annotations

import itertools
import json
import random
import string
from collections.abc import Iterator

from tito_audit.conversations.conversation import ASSISTANT, SYSTEM, TOOL, USER, Conversation, Message
from tito_audit.conversations.reasoning_forms import nearest_realizable, short_kind
from tito_audit.conversations.stress import CONTROL_LOOKALIKES, OBSERVATIONS, PHRASES, STRESS_TEXTS, decorate

APPENDED = (TOOL, USER, SYSTEM, ASSISTANT)
CONTENT = ("empty", "none", "text")
REASONING = ("absent", "empty", "present")
CALLS = ("one", "parallel")
ARGS = ("dict", "string")
TOOLS_SCHEMA = ("present", "absent")

SHAPE_AXES: dict[str, tuple[str, ...]] = {
    "appended": APPENDED,
    "content": CONTENT,
    "reasoning": REASONING,
    "calls": CALLS,
    "args": ARGS,
    "tools": TOOLS_SCHEMA,
}
SHAPE_GRID: tuple[dict[str, str], ...] = tuple(
    dict(zip(SHAPE_AXES, values, strict=True)) for values in itertools.product(*SHAPE_AXES.values())
)

DEFAULT_MAX_TURNS = 4
MAX_TURNS_LIMIT = 100
"""``--max-turns`` at most: a longer generated conversation passes the audit's window (400 messages) anyway, and
generating 100,000 turns per conversation would take hours before the first progress line."""

TOOL_SCHEMAS: dict[str, dict] = {
    "get_weather": {
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
    "search_products": {
        "description": "Search the shop catalogue.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "filters": {"type": "object", "description": "Attribute filters"},
                "limit": {"type": "integer"},
            },
            "required": ["query"],
        },
    },
    "run_shell": {
        "description": "Run a shell command in the repository.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
            "required": ["command"],
        },
    },
    "move": {
        "description": "Move the player in the grid world.",
        "parameters": {
            "type": "object",
            "properties": {"direction": {"type": "string", "enum": ["up", "down", "left", "right"]}},
            "required": ["direction"],
        },
    },
}
TOOL_OBSERVATIONS = {
    "get_weather": ("bandit", "room"),
    "search_products": ("webshop",),
    "run_shell": ("shell", "file-view", "diff"),
    "move": ("sokoban", "frozen-lake"),
}
ASSISTANT_STRESS = tuple(n for n in STRESS_TEXTS if n != "markup-lookalike")


def tool_schemas() -> list[dict]:
    return [{"type": "function", "function": {"name": n, **s}} for n, s in TOOL_SCHEMAS.items()]


def _call_id(rng: random.Random) -> str:
    """Nine alphanumeric characters: the form every template we know accepts (Mistral's demand it)."""
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(9))


def _arguments(name: str, rng: random.Random) -> dict:
    if name == "get_weather":
        args: dict = {"city": rng.choice(["Paris", "São Paulo", "東京", "New York"])}
        if rng.random() < 0.5:
            args["unit"] = rng.choice(["celsius", "fahrenheit"])
        return args
    if name == "search_products":
        return {
            "query": rng.choice(["running shoes", 'shoes "size 10"', "café mug", "usb-c\tcable"]),
            "filters": {"price": {"max": rng.choice([50, 99.5])}, "tags": ["sale", "new"]},
            "limit": rng.choice([5, 10]),
        }
    if name == "run_shell":
        return {"command": rng.choice(["pytest -q", "ls -la src/", "grep -rn 'TODO' .", 'echo "a\\nb"'])}
    return {"direction": rng.choice(["up", "down", "left", "right"])}


def _assistant_text(rng: random.Random) -> str:
    base = rng.choice(["Let me look that up.", "I will check.", "Here is what I found.", "Done: the task is complete."])
    if rng.random() < 0.5:
        fragment = STRESS_TEXTS[rng.choice(ASSISTANT_STRESS)]
        base = base + " " + fragment if rng.random() < 0.5 else fragment + base
    return base


def realizable_kind(kind: str, allowed: tuple[str, ...] | None) -> str:
    """``kind``, or the nearest kind in ``allowed`` (None allows every kind), as
    :func:`tito_audit.audit.reasoning_block.nearest_realizable` chooses it.

    >>> realizable_kind("present", ("absent", "empty")), realizable_kind("absent", ("empty", "present"))
    ('absent', 'present')
    """
    if allowed is None:
        return kind
    return short_kind(nearest_realizable(f"reasoning {kind}", [f"reasoning {k}" for k in allowed]))


def _reasoning(kind: str, rng: random.Random, allowed: tuple[str, ...] | None = None) -> str | None:
    """The reasoning of one assistant turn. The random draws depend only on ``kind``, so a conversation whose
    reasoning a variant does not allow differs from the unrestricted one in its reasoning alone."""
    text = (
        decorate(rng.choice(["The user wants data; call the tool.", "I should verify the result first."]), rng)
        if kind == "present"
        else None
    )
    realized = realizable_kind(kind, allowed)
    if realized == "absent":
        return None
    if realized == "empty":
        return ""
    return text if text is not None else "Let me think about which tool to use."


def _user_text(rng: random.Random) -> str:
    text = rng.choice(
        [
            "What's the weather in Paris?",
            "Find me running shoes under $50.",
            "Fix the failing test.",
            "Push the box.",
        ]
    )
    text = decorate(text, rng)
    if rng.random() < 0.15:
        text += " " + rng.choice(CONTROL_LOOKALIKES)
    return text


def _tool_result(name: str, rng: random.Random, phrase: str) -> str:
    observation = OBSERVATIONS[rng.choice(TOOL_OBSERVATIONS[name])]
    if rng.random() < 0.3:
        body = json.dumps({"result": phrase, "observation": observation}, ensure_ascii=False)
    else:
        body = f"{phrase}\n{observation}"
    body = decorate(body, rng, probability=0.4)
    if rng.random() < 0.1:
        body += rng.choice(CONTROL_LOOKALIKES)
    return body


class _Builder:
    def __init__(self, shape: dict[str, str], rng: random.Random, allowed: tuple[str, ...] | None) -> None:
        self.shape = shape
        self.rng = rng
        self.allowed = allowed
        self.messages: list[Message] = []
        self.must_appear: list[str] = []

    def add(self, message: Message, *needles: str) -> None:
        self.must_appear.extend(n for n in needles if n and n not in self.must_appear)
        self.messages.append(message)

    def tool_call_turn(self) -> None:
        rng, shape = self.rng, self.shape
        names = list(TOOL_SCHEMAS)
        count = 1 if shape["calls"] == "one" else rng.choice([2, 3])
        chosen = [rng.choice(names) for _ in range(count)]
        calls = []
        for name in chosen:
            args = _arguments(name, rng)
            calls.append(
                {
                    "id": _call_id(rng),
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if shape["args"] == "dict" else json.dumps(args, ensure_ascii=False),
                    },
                }
            )
        content: str | None = {"empty": "", "none": None, "text": _assistant_text(rng)}[shape["content"]]
        message: Message = {"role": ASSISTANT, "content": content, "tool_calls": calls}
        reasoning = _reasoning(shape["reasoning"], rng, self.allowed)
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        self.add(message)
        for call in calls:
            phrase = rng.choice(PHRASES)
            name = call["function"]["name"]
            self.add(
                {
                    "role": TOOL,
                    "tool_call_id": call["id"],
                    "name": name,
                    "content": _tool_result(name, rng, phrase),
                },
                phrase,
            )

    def final_turn(self) -> None:
        message: Message = {"role": ASSISTANT, "content": _assistant_text(self.rng)}
        reasoning = _reasoning(self.shape["reasoning"], self.rng, self.allowed)
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        self.add(message)


def generate_conversation(
    index: int, seed: int, max_turns: int = DEFAULT_MAX_TURNS, reasoning: tuple[str, ...] | None = None
) -> Conversation:
    """Conversation ``index`` of the seeded sequence (independent of how many are generated).

    ``reasoning`` lists the reasoning kinds (``absent``, ``empty``, ``present``) a model can produce under
    the variant being audited (see :func:`tito_audit.audit.reasoning_block.variant_reasoning`); a grid cell asking for
    another kind gets the nearest allowed one, recorded in the conversation's shape. None allows all.
    """
    order = list(range(len(SHAPE_GRID)))
    random.Random(f"grid:{seed}:{index // len(SHAPE_GRID)}").shuffle(order)
    shape = dict(SHAPE_GRID[order[index % len(SHAPE_GRID)]])
    rng = random.Random(f"conversation:{seed}:{index}")
    build = _Builder(shape, rng, reasoning)
    if rng.random() < 0.7:
        build.add({"role": SYSTEM, "content": decorate("You are a helpful agent with tools.", rng, 0.3)})
    build.add({"role": USER, "content": _user_text(rng)})
    turns = rng.randint(2, max(2, max_turns))
    for turn in range(turns):
        last = turn == turns - 1
        if last:
            build.final_turn()
            break
        if shape["appended"] == ASSISTANT and turn == 0:
            build.final_turn()  # an assistant message directly followed by another assistant turn
            continue
        if shape["appended"] == USER and rng.random() < 0.4:
            build.final_turn()  # an answer, then the user asks again
            build.add({"role": USER, "content": _user_text(rng)})
            continue
        build.tool_call_turn()
        if shape["appended"] == USER and rng.random() < 0.7:
            build.add({"role": USER, "content": _user_text(rng)})
        elif shape["appended"] == SYSTEM and rng.random() < 0.7:
            build.add({"role": SYSTEM, "content": decorate("Note: the tool budget is 3 calls.", rng, 0.3)})
    shape["reasoning"] = realizable_kind(shape["reasoning"], reasoning)
    return Conversation(
        id=f"c{index:04d}",
        messages=build.messages,
        tools=tool_schemas() if shape["tools"] == "present" else None,
        shape=shape,
        must_appear=build.must_appear,
    )


def generate(
    count: int, seed: int = 0, max_turns: int = DEFAULT_MAX_TURNS, reasoning: tuple[str, ...] | None = None
) -> Iterator[Conversation]:
    """``count`` conversations for ``seed``; the same seed (and ``reasoning``) always gives the same ones."""
    for index in range(count):
        yield generate_conversation(index, seed, max_turns, reasoning)
