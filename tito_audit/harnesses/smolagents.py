"""smolagents (PyPI ``smolagents[openai]``): a ToolCallingAgent with one tool on its OpenAI-compatible model, not
streamed; it answers through its own ``final_answer`` tool."""

from __future__ import annotations

from tito_audit.harnesses.harness import CHAT, DEFAULT, PYPI, WITH_SESSION_ID, Harness, framework_command

HARNESS = Harness(
    "smolagents",
    "smolagents",
    "1.26.0",
    PYPI,
    CHAT,
    streamed=False,
    command=framework_command("smolagents", "drive_smolagents"),
    configurations=(DEFAULT, WITH_SESSION_ID),
    requirements=("smolagents[openai]==1.26.0",),
    venv="smolagents",
    preload=("smolagents",),
)
