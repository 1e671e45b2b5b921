"""openai-agents: an Agent with one function tool, run by Runner.run_sync, on the chat completions model
(``chat``) or the Responses model (``responses``): ``python drive_openai_agents.py chat|responses``."""

import sys

from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from looking import BASE_URL, HEADERS, INSTRUCTIONS, MODEL, TASK, run_shell
from openai import AsyncOpenAI

set_tracing_disabled(True)
client = AsyncOpenAI(base_url=BASE_URL, api_key="unused", default_headers=HEADERS)


@function_tool
def bash(command: str) -> str:
    """Run a shell command in the task folder and return what it printed."""
    return run_shell(command)


kind = OpenAIResponsesModel if sys.argv[1] == "responses" else OpenAIChatCompletionsModel
agent = Agent(name="looker", instructions=INSTRUCTIONS, tools=[bash], model=kind(model=MODEL, openai_client=client))
print(Runner.run_sync(agent, TASK, max_turns=12).final_output)
