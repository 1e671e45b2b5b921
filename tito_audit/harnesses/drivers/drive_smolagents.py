"""smolagents: a ToolCallingAgent with one tool on its OpenAI-compatible model (it answers through its own
``final_answer`` tool)."""

from looking import BASE_URL, HEADERS, MODEL, TASK, run_shell
from smolagents import OpenAIServerModel, ToolCallingAgent, tool


@tool
def bash(command: str) -> str:
    """Run a shell command in the task folder and return what it printed.

    Args:
        command: the command to run.
    """
    return run_shell(command)


model = OpenAIServerModel(
    model_id=MODEL, api_base=BASE_URL, api_key="unused", client_kwargs={"default_headers": HEADERS}
)
print(ToolCallingAgent(tools=[bash], model=model, max_steps=8).run(TASK))
