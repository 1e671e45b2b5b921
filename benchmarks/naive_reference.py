"""The naive reference an audit is timed against, run as a process of its own (``python naive_reference.py FOLDER``).

What a user would write to look at a template by hand: import transformers, load the tokenizer, then render and
tokenize every prefix of 96 fixed four-call tool conversations with ``apply_chat_template(..., tokenize=True)``: 960
renders, nothing cached, nothing of tito-audit imported. A model's template choice is the tokenizer's own (its
``chat_template``, else ``chat_template.jinja`` beside it). Prints the renders done, and how many the template
refused (a template that refuses tool conversations still costs its attempts).

``--floor`` renders instead what the floor counts (``bench_audit.py`` passes the distinct prefixes of the audit's own
conversations through a JSON file): every distinct prefix rendered and tokenized once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONVERSATIONS = 96
CALLS = 4

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order by its number.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "description": "The order number"},
                    "include_items": {"type": "boolean", "description": "List the items too"},
                },
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List the files of a folder.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "The folder"},
                    "depth": {"type": "integer", "description": "How deep to go"},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "convert_units",
            "description": "Convert a quantity between units.",
            "parameters": {
                "type": "object",
                "properties": {
                    "value": {"type": "number", "description": "The quantity"},
                    "source": {"type": "string", "description": "Its unit"},
                    "target": {"type": "string", "description": "The unit wanted"},
                },
                "required": ["value", "source", "target"],
            },
        },
    },
]

WORDS = [
    "order",
    "parcel",
    "folder",
    "invoice",
    "metre",
    "gallon",
    "report",
    "draft",
    "kitchen",
    "window",
    "river",
    "market",
    "garden",
    "station",
]


def _value(schema: dict, draw: random.Random):
    """A value of ``schema``'s type: the first of an enum, a few words, a number, a flag, a list of one."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind is None:
        kinds = [
            option.get("type")
            for option in schema.get("anyOf", schema.get("oneOf", []))
            if option.get("type") != "null"
        ]
        kind = kinds[0] if kinds else "string"
    if isinstance(kind, list):
        kind = kind[0]
    if kind == "integer":
        return draw.randrange(1, 10)
    if kind == "number":
        return round(draw.uniform(0, 500), 2)
    if kind == "boolean":
        return draw.random() < 0.5
    if kind == "array":
        return [_value(schema.get("items", {}), draw)]
    if kind == "object":
        return {
            name: _value(sub, draw)
            for name, sub in schema.get("properties", {}).items()
            if name in schema.get("required", [])
        }
    if kind == "null":
        return None
    return " ".join(draw.sample(WORDS, 2))


def conversations(tools: list[dict]) -> list[list[dict]]:
    """96 fixed conversations: a user request, four tool calls each answered by a tool result, a final answer."""
    draw = random.Random(53)
    every = []
    for index in range(CONVERSATIONS):
        messages: list[dict] = [
            {"role": "user", "content": f"Please help with task {index}: {' '.join(draw.sample(WORDS, 5))}."}
        ]
        for call in range(CALLS):
            function = tools[draw.randrange(len(tools))]["function"]
            name, call_id = function["name"], f"call_{index}_{call}"
            parameters = function.get("parameters", {})
            arguments = {
                key: _value(sub, draw)
                for key, sub in parameters.get("properties", {}).items()
                if key in parameters.get("required", []) or draw.random() < 0.5
            }
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                    ],
                }
            )
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "name": name, "content": " ".join(draw.sample(WORDS, 6))}
            )
        messages.append({"role": "assistant", "content": f"Done: {' '.join(draw.sample(WORDS, 4))}."})
        every.append(messages)
    return every


def _tokenizer(folder: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if not tokenizer.chat_template and os.path.isfile(os.path.join(folder, "chat_template.jinja")):
        with open(os.path.join(folder, "chat_template.jinja"), encoding="utf-8") as handle:
            tokenizer.chat_template = handle.read()
    return tokenizer


def render_all(tokenizer, prefixes) -> tuple[int, int]:
    """Render and tokenize each (messages, tools, generation prompt, settings); (rendered, refused)."""
    rendered = refused = 0
    for messages, tools, generation_prompt, settings in prefixes:
        try:
            tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=generation_prompt, tokenize=True, **settings
            )
            rendered += 1
        except Exception:  # a template that refuses a shape raises; the attempt is part of the cost
            refused += 1
    return rendered, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument(
        "--tools", help="a JSON file of tool schemas the conversations declare and call (default: three)"
    )
    parser.add_argument("--floor", help="a JSON file of prefixes (messages, tools, generation prompt, settings)")
    args = parser.parse_args()
    started = time.perf_counter()
    tokenizer = _tokenizer(args.folder)
    loaded = time.perf_counter() - started
    if args.floor:
        with open(args.floor, encoding="utf-8") as handle:
            prefixes = [tuple(entry) for entry in json.load(handle)]
    else:
        tools = TOOLS
        if args.tools:
            with open(args.tools, encoding="utf-8") as handle:
                tools = json.load(handle)
        prefixes = [
            (messages[:k], tools, False, {}) for messages in conversations(tools) for k in range(1, len(messages) + 1)
        ]
    rendered, refused = render_all(tokenizer, prefixes)
    json.dump({"rendered": rendered, "refused": refused, "load_s": loaded}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
