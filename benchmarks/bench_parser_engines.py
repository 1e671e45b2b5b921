"""Where SGLang's and vLLM's parsers part: the same completions, written in the layouts models write, handed to each
engine's parser the way that engine hands them over (tito-audit's per-engine hand-over on the sampled ids), and the
two parsed messages compared (content, reasoning, calls by name and arguments; call ids aside).

Three parser families, on the shared tokenizer of a model each engine documents them for: vLLM ``hermes`` vs SGLang
``qwen25`` (Qwen2.5-7B-Instruct), ``qwen3_coder`` in both (Qwen3-Coder-30B-A3B-Instruct), and the ``qwen3`` reasoning
parser in both (Qwen3-4B). Prints one line per layout (agree / differ, and the two messages where they differ) and a
total per family: the table of docs/audited.md's parse step.

Run: ``make bench-parser-engines`` or ``python benchmarks/bench_parser_engines.py --mirror ../shared/tokenizers``
(needs both engines' parsers: ``make install`` and ``make vllm``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ls",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "all": {"type": "boolean"}},
            },
        },
    }
]
CALL = '{"name": "ls", "arguments": {"path": "."}}'
BAD = '{"name": }'
HERMES = [
    ("a call alone", f"<tool_call>\n{CALL}\n</tool_call>", True),
    ("content, newline, call", f"Let me look.\n<tool_call>\n{CALL}\n</tool_call>", True),
    ("content, blank line, call", f"Let me look.\n\n<tool_call>\n{CALL}\n</tool_call>", True),
    ("compact call (no newlines)", f"<tool_call>{CALL}</tool_call>", True),
    ("keys in another order", '<tool_call>\n{"arguments": {"path": "."}, "name": "ls"}\n</tool_call>', True),
    ("two calls", f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{CALL}\n</tool_call>", True),
    ("content after the call", f"<tool_call>\n{CALL}\n</tool_call>\nDone.", True),
    ("a call to an undeclared tool", '<tool_call>\n{"name": "rm", "arguments": {"path": "/"}}\n</tool_call>', True),
    ("unclosed call, whole JSON (max_tokens)", f"<tool_call>\n{CALL}", False),
    ("truncated JSON (max_tokens)", 'Let me look.\n<tool_call>\n{"name": "ls", "argu', False),
    (
        "a good call beside a malformed one",
        f'<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{{"name": }}\n</tool_call>',
        True,
    ),
    ("plain content", "The folder holds README.md.", True),
]
XML_CALL = "<tool_call>\n<function=ls>\n<parameter=path>\n.\n</parameter>\n</function>\n</tool_call>"
CODER = [
    ("a call alone", XML_CALL, True),
    ("content, newline, call", "Let me look.\n" + XML_CALL, True),
    ("compact call", "<tool_call><function=ls><parameter=path>.</parameter></function></tool_call>", True),
    ("two calls", XML_CALL + "\n" + XML_CALL, True),
    ("a call to an undeclared tool", XML_CALL.replace("=ls>", "=rm>"), True),
    ("unclosed call (max_tokens)", "<tool_call>\n<function=ls>\n<parameter=path>\n.\n</parameter>", False),
    ("plain content", "The folder holds README.md.", True),
]
THINKING = [
    ("think block, then answer", "<think>\nLook first.\n</think>\n\nThe answer.", True, {}),
    ("no tags", "The answer.", True, {}),
    ("no tags, enable_thinking=false", "The answer.", True, {"enable_thinking": False}),
    ("closing tag only (the prompt opened it)", "Look first.\n</think>\n\nThe answer.", True, {}),
]
FAMILIES = [
    ("vLLM hermes / SGLang qwen25", "Qwen/Qwen2.5-7B-Instruct", ("hermes", None), ("qwen25", None), "<|im_end|>"),
    ("qwen3_coder", "Qwen/Qwen3-Coder-30B-A3B-Instruct", ("qwen3_coder", None), ("qwen3_coder", None), "<|im_end|>"),
    ("qwen3 reasoning", "Qwen/Qwen3-4B", (None, "qwen3"), (None, "qwen3"), "<|im_end|>"),
]


def comparable(message: dict) -> dict:
    calls = [[c["function"]["name"], c["function"]["arguments"]] for c in message.get("tool_calls") or []]
    return {
        "content": message.get("content") or "",
        "reasoning": message.get("reasoning_content") or "",
        "calls": calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", action="append", default=[], help="a folder of <org>--<name>/ model folders")
    args = parser.parse_args()

    from tito_audit.model.load_by_id import load_by_id
    from tito_audit.parse.handover import Sampled, hand_over
    from tito_audit.parse.sglang import SGLangParser
    from tito_audit.parse.vllm import VLLMParser

    mirrors = [Path(m) for m in args.mirror]
    for title, model_id, vllm_pair, sglang_pair, stop in FAMILIES:
        loaded = load_by_id(model_id, mirrors=mirrors, allow_hub=False)
        tokenizer = loaded.tokenizer
        engines = {"vLLM": VLLMParser(*vllm_pair, loaded.resolved.path), "SGLang": SGLangParser(*sglang_pair)}
        prompt = "<|im_start|>user\nWhat is here?<|im_end|>\n<|im_start|>assistant\n"
        prompt_ids = tuple(tokenizer.encode(prompt, add_special_tokens=False))
        layouts = (
            [(name, text, stopped, {}, TOOLS) for name, text, stopped in (HERMES if "hermes" in title else CODER)]
            if vllm_pair[0]
            else [(name, text, stopped, kwargs, None) for name, text, stopped, kwargs in THINKING]
        )
        agree = 0
        print(f"\n{title} ({model_id})")
        for name, text, stopped, kwargs, tools in layouts:
            written = text + stop if stopped else text
            ids = tuple(tokenizer.encode(written, add_special_tokens=False))
            messages = {}
            for engine, engine_parser in engines.items():
                sampled = Sampled(
                    text=written,
                    ids=ids,
                    stop=stop if stopped else None,
                    tools=tools,
                    prompt=prompt,
                    prompt_ids=prompt_ids,
                    call_id_seed=name,
                    template_kwargs=kwargs,
                )
                messages[engine] = comparable(engine_parser.parse(hand_over(engine_parser, sampled)))
            same = messages["vLLM"] == messages["SGLang"]
            agree += same
            print(f"  {'agree ' if same else 'DIFFER'}  {name}")
            if not same:
                for engine, message in messages.items():
                    print(f"          {engine:6} {json.dumps(message, ensure_ascii=False)}")
        print(f"  {agree} of {len(layouts)} layouts agree")


if __name__ == "__main__":
    main()
