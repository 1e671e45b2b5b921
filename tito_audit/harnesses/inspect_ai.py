"""inspect-ai (PyPI ``inspect-ai``): one sample solved by its ReAct agent with one tool, on its OpenAI-compatible
provider (``openai-api/tito/MODEL``), not streamed."""

from __future__ import annotations

from tito_audit.harnesses.harness import CHAT, DEFAULT, PYPI, Harness, framework_command

HARNESS = Harness(
    "inspect-ai",
    "inspect-ai",
    "0.3.285",
    PYPI,
    CHAT,
    streamed=False,
    command=framework_command("inspect-ai", "drive_inspect_ai"),
    configurations=(DEFAULT,),
    requirements=("inspect-ai==0.3.285", "openai==3.57.0"),
    venv="inspect-ai",
)
