"""openai-agents (PyPI ``openai-agents``): an Agent with one function tool, ``Runner.run_sync``, on its chat
completions model and on its Responses model (two rows), not streamed."""

from __future__ import annotations

from tito_audit.harnesses.harness import CHAT, DEFAULT, PYPI, RESPONSES, WITH_SESSION_ID, Harness, framework_command

REQUIREMENTS = ("openai-agents==0.24.0",)
CHAT_HARNESS = Harness(
    "openai-agents-chat",
    "openai-agents",
    "0.24.0",
    PYPI,
    CHAT,
    streamed=False,
    command=framework_command("openai-agents", "drive_openai_agents", "chat"),
    configurations=(DEFAULT, WITH_SESSION_ID),
    requirements=REQUIREMENTS,
    venv="openai-agents",
    preload=("agents", "openai"),
    label="openai-agents (chat)",
)
RESPONSES_HARNESS = Harness(
    "openai-agents-responses",
    "openai-agents",
    "0.24.0",
    PYPI,
    RESPONSES,
    streamed=False,
    command=framework_command("openai-agents", "drive_openai_agents", "responses"),
    configurations=(DEFAULT, WITH_SESSION_ID),
    requirements=REQUIREMENTS,
    venv="openai-agents",
    preload=("agents", "openai"),
    label="openai-agents (Responses)",
)
