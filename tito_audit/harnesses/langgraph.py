"""langgraph (PyPI ``langgraph`` with ``langchain-openai``): the prebuilt ReAct agent on ChatOpenAI, one tool,
``invoke``, not streamed."""

from __future__ import annotations

from tito_audit.harnesses.harness import CHAT, DEFAULT, PYPI, WITH_SESSION_ID, Harness, framework_command

HARNESS = Harness(
    "langgraph",
    "langgraph",
    "1.2.24",
    PYPI,
    CHAT,
    streamed=False,
    command=framework_command("langgraph", "drive_langgraph"),
    configurations=(DEFAULT, WITH_SESSION_ID),
    requirements=("langgraph==1.2.24", "langchain-openai==1.7.4"),
    venv="langgraph",
    preload=("langgraph.prebuilt", "langchain_openai", "langchain_core.tools"),
)
