"""Runs a pydantic-ai agent, as it ships, against the gateway: ``python pydantic_ai_run.py URL FOLDER``. It names no
session; the gateway finds each request's session from its conversation."""

from __future__ import annotations

import pathlib
import sys

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

URL, FOLDER = sys.argv[1], pathlib.Path(sys.argv[2])

model = OpenAIChatModel("Qwen/Qwen3-4B", provider=OpenAIProvider(base_url=URL + "/v1", api_key="unused"))
agent = Agent(model, instructions="You read files to answer questions.")


@agent.tool_plain
def read_file(path: str) -> str:
    """Read a file of the working folder."""
    target = FOLDER / path
    return target.read_text() if target.is_file() else f"no file {path}"


@agent.tool_plain
def list_files(folder: str = ".") -> str:
    """List the files of a folder."""
    return "\n".join(sorted(p.name for p in (FOLDER / folder).iterdir()))


print(agent.run_sync("What does the README here say?").output)
