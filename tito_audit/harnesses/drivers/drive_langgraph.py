"""langgraph: the prebuilt ReAct agent (``create_react_agent``) on langchain-openai's ChatOpenAI, one tool."""

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from looking import BASE_URL, HEADERS, INSTRUCTIONS, MODEL, TASK, run_shell


@tool
def bash(command: str) -> str:
    """Run a shell command in the task folder and return what it printed."""
    return run_shell(command)


model = ChatOpenAI(model=MODEL, base_url=BASE_URL, api_key="unused", default_headers=HEADERS, max_retries=0)
agent = create_react_agent(model, [bash], prompt=INSTRUCTIONS)
result = agent.invoke({"messages": [("user", TASK)]}, {"recursion_limit": 24})
print(result["messages"][-1].content)
