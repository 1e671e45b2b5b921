"""inspect-ai: one sample solved by its ReAct agent with one tool, the model from its OpenAI-compatible provider
(``openai-api/tito/MODEL``, its base URL and key from ``TITO_BASE_URL`` and ``TITO_API_KEY``)."""

import os

from inspect_ai import Task, eval
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.tool import tool
from looking import BASE_URL, MODEL, TASK, run_shell

os.environ.setdefault("TITO_API_KEY", "unused")
os.environ["TITO_BASE_URL"] = BASE_URL


@tool
def bash():
    async def execute(command: str) -> str:
        """Run a shell command in the task folder and return what it printed.

        Args:
            command: the command to run.
        """
        return run_shell(command)

    return execute


task = Task(dataset=[Sample(input=TASK)], solver=react(tools=[bash()]), message_limit=24)
config = {}
if os.environ.get("TITO_OPTION_REASONING_HISTORY"):  # a configuration's GenerateConfig option
    config["reasoning_history"] = os.environ["TITO_OPTION_REASONING_HISTORY"]
logs = eval(
    task, model=f"openai-api/tito/{MODEL}", log_dir=os.path.join(os.environ["HOME"], "logs"), display="none", **config
)
print(logs[0].status)
if logs[0].status != "success":
    raise SystemExit(f"inspect-ai: the eval ended {logs[0].status}: {logs[0].error}")
