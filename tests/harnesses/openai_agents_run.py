"""Runs an openai-agents (the OpenAI Agents SDK) agent, as it ships, against the gateway: ``python openai_agents_run.py
URL chat|responses FOLDER``. It names no session; the gateway finds each request's session from its conversation."""

from __future__ import annotations

import asyncio
import pathlib
import sys

from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

URL, DIALECT, FOLDER = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])


@function_tool
def read_file(path: str) -> str:
    """Read a file of the working folder."""
    target = FOLDER / path
    return target.read_text() if target.is_file() else f"no file {path}"


@function_tool
def list_files(folder: str = ".") -> str:
    """List the files of a folder."""
    return "\n".join(sorted(p.name for p in (FOLDER / folder).iterdir()))


async def main() -> None:
    set_tracing_disabled(True)  # nothing leaves the machine
    client = AsyncOpenAI(base_url=URL + "/v1", api_key="unused", max_retries=0)
    kind = OpenAIResponsesModel if DIALECT == "responses" else OpenAIChatCompletionsModel
    agent = Agent(
        name="reader",
        instructions="You read files to answer questions.",
        tools=[read_file, list_files],
        model=kind(model="Qwen/Qwen3-4B", openai_client=client),
    )
    result = await Runner.run(agent, "What does the README here say?", max_turns=8)
    print(result.final_output)


asyncio.run(main())
