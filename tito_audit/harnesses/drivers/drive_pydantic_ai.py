"""pydantic-ai: an Agent with one plain tool on its OpenAI chat model, pointed at the gateway by its provider."""

from looking import BASE_URL, HEADERS, INSTRUCTIONS, MODEL, TASK, run_shell
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

client = AsyncOpenAI(base_url=BASE_URL, api_key="unused", default_headers=HEADERS)
agent = Agent(OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client)), instructions=INSTRUCTIONS)


@agent.tool_plain
def bash(command: str) -> str:
    """Run a shell command in the task folder and return what it printed."""
    return run_shell(command)


print(agent.run_sync(TASK).output)
