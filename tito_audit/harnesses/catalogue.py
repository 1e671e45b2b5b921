"""Every harness the matrix runs, in the table's order: the CLI harnesses from npm, then the frameworks from PyPI."""

from __future__ import annotations

from tito_audit.harnesses import (
    claude_code,
    codex,
    inspect_ai,
    langgraph,
    mini_swe_agent,
    openai_agents,
    opencode,
    pydantic_ai,
    qwen_code,
    smolagents,
)
from tito_audit.harnesses.harness import Harness

HARNESSES: tuple[Harness, ...] = (
    codex.HARNESS,
    claude_code.HARNESS,
    opencode.HARNESS,
    qwen_code.HARNESS,
    mini_swe_agent.TOOL_CALLING,
    mini_swe_agent.TEXT_BASED,
    openai_agents.CHAT_HARNESS,
    openai_agents.RESPONSES_HARNESS,
    pydantic_ai.HARNESS,
    smolagents.HARNESS,
    langgraph.HARNESS,
    inspect_ai.HARNESS,
)


def harness_named(name: str) -> Harness:
    found = next((h for h in HARNESSES if h.name == name), None)
    if found is None:
        known = ", ".join(h.name for h in HARNESSES)
        raise KeyError(f"no harness named {name!r} (known: {known})")
    return found
