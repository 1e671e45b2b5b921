"""pydantic-ai (PyPI ``pydantic-ai-slim[openai]``): an Agent with one plain tool on its OpenAI chat model,
``run_sync``, not streamed."""

from __future__ import annotations

from tito_audit.harnesses.harness import CHAT, DEFAULT, PYPI, WITH_SESSION_ID, Harness, framework_command

HARNESS = Harness(
    "pydantic-ai",
    "pydantic-ai",
    "2.66.0",
    PYPI,
    CHAT,
    streamed=False,
    command=framework_command("pydantic-ai", "drive_pydantic_ai"),
    configurations=(DEFAULT, WITH_SESSION_ID),
    requirements=("pydantic-ai-slim[openai]==2.66.0",),
    venv="pydantic-ai",
    preload=("pydantic_ai", "pydantic_ai.models.openai", "pydantic_ai.providers.openai"),
)
