"""The tools generated conversations call: the built-in set, or the user's own (``--tools FILE``, the OpenAI ``tools``
JSON a user gives their engine).

Every property has a description, as real tool schemas do (some templates write them and refuse a property without
one). The built-in set covers every form of argument the contract asks for in the default conversation count (strings,
integers, numbers, booleans, nulls, enums, type lists, ``anyOf``/``oneOf`` nullable fields, arrays of scalars and of
objects, nested objects, optional properties, and a tool without parameters); each tool says which observations its
results look like, so a tool result reads like the environment that tool belongs to.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tito_audit.conversations.stress import OBSERVATIONS

BUILT_IN_TOOLS: dict[str, dict] = {
    "get_weather": {
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14, "description": "Days of forecast"},
            },
            "required": ["city"],
        },
    },
    "search_products": {
        "description": "Search the shop catalogue.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Search words"},
                "filters": {
                    "type": "object",
                    "description": "Attribute filters",
                    "properties": {
                        "max_price": {"type": "number", "description": "Highest price"},
                        "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags to match"},
                        "in_stock": {"type": "boolean", "description": "Only items in stock"},
                    },
                },
                "limit": {"type": "integer", "description": "Results per page"},
                "sort": {
                    "anyOf": [{"type": "string", "enum": ["price", "rating"]}, {"type": "null"}],
                    "description": "Sort order",
                },
            },
            "required": ["query"],
        },
    },
    "run_shell": {
        "description": "Run a shell command in the repository.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "Shell command"},
                "timeout": {"type": "number", "description": "Seconds before it is stopped"},
                "background": {"type": "boolean", "description": "Run without waiting"},
            },
            "required": ["command"],
        },
    },
    "move": {
        "description": "Move the player in the grid world.",
        "parameters": {
            "type": "object",
            "properties": {
                "direction": {"type": "string", "enum": ["up", "down", "left", "right"], "description": "Where to go"}
            },
            "required": ["direction"],
        },
    },
    "update_ticket": {
        "description": "Update a support ticket.",
        "parameters": {
            "type": "object",
            "properties": {
                "ticket_id": {"type": "integer", "description": "Ticket number"},
                "status": {"type": "string", "enum": ["open", "pending", "closed"], "description": "New status"},
                "assignee": {"type": ["string", "null"], "description": "Agent, or null for nobody"},
                "urgent": {"type": "boolean", "description": "Whether it is urgent"},
                "labels": {"type": "array", "items": {"type": "string"}, "description": "Labels to set"},
                "due": {"oneOf": [{"type": "string", "format": "date"}, {"type": "null"}], "description": "Due date"},
                "hours_spent": {"type": "number", "description": "Hours worked"},
            },
            "required": ["ticket_id", "urgent", "assignee"],
        },
    },
    "add_to_cart": {
        "description": "Add items to the shopping cart.",
        "parameters": {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "description": "Articles to add",
                    "items": {
                        "type": "object",
                        "properties": {
                            "sku": {"type": "string", "description": "Article number"},
                            "quantity": {"type": "integer", "minimum": 1, "description": "How many"},
                            "gift": {"type": "boolean", "description": "Gift wrapped"},
                            "price": {"type": "number", "description": "Unit price"},
                        },
                        "required": ["sku", "quantity"],
                    },
                    "minItems": 1,
                },
                "coupon": {"type": ["string", "null"], "description": "Coupon code, or null"},
            },
            "required": ["items"],
        },
    },
    "get_time": {
        "description": "Get the current time.",
        "parameters": {"type": "object", "properties": {}},
    },
}

BUILT_IN_OBSERVATIONS: dict[str, tuple[str, ...]] = {
    "get_weather": ("bandit", "room"),
    "search_products": ("webshop",),
    "run_shell": ("shell", "file-view", "diff"),
    "move": ("sokoban", "frozen-lake"),
    "update_ticket": ("ticket",),
    "add_to_cart": ("webshop",),
    "get_time": ("clock",),
}


@dataclass(frozen=True, eq=False)
class ToolSet:
    """The tools generated conversations declare and call, and where they came from."""

    tools: tuple[dict, ...]
    source: str
    """``built-in``, or the file they were read from."""

    @property
    def key(self) -> str:
        """A digest of the tools (two sets with the same schemas give the same conversations)."""
        encoded = json.dumps(self.tools, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(encoded.encode("utf-8")).hexdigest()[:16]

    @property
    def names(self) -> list[str]:
        return [str(tool["function"]["name"]) for tool in self.tools]

    def schemas(self) -> list[dict]:
        """The ``tools`` list a request declares (a new list each time: callers may change it)."""
        return [dict(tool) for tool in self.tools]

    def declared(self, called: set[str], rng: random.Random) -> list[dict]:
        """What one conversation's requests declare: the user's tools all of them, as their environment does; of the
        built-in set, the tools the conversation calls and one or two others (a render writes every declared tool
        into the prompt, and the built-in set is there to cover argument forms, not to make prompts long)."""
        if self.source != BUILT_IN:
            return self.schemas()
        others = [name for name in self.names if name not in called]
        extra = set(rng.sample(others, min(len(others), rng.choice((1, 2)))))
        return [dict(tool) for tool in self.tools if tool["function"]["name"] in called | extra]

    def observation(self, name: str, rng: random.Random) -> str:
        """What a result of tool ``name`` looks like: its environment's observation (any, for a user's tool)."""
        kinds = BUILT_IN_OBSERVATIONS.get(name) if self.source == BUILT_IN else None
        return OBSERVATIONS[rng.choice(kinds or sorted(OBSERVATIONS))]


BUILT_IN = "built-in"


def built_in_tools() -> ToolSet:
    return ToolSet(
        tuple({"type": "function", "function": {"name": n, **s}} for n, s in BUILT_IN_TOOLS.items()), BUILT_IN
    )


def user_tools(tools: Sequence[dict], source: str) -> ToolSet:
    """The user's tools (checked with :func:`tito_audit.conversations.schema_draw.check_tool_schemas` first)."""
    return ToolSet(tuple(tools), source)


def tool_schemas() -> list[dict]:
    """The built-in tools as a request declares them."""
    return built_in_tools().schemas()
