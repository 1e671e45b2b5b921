"""inspect-ai (PyPI ``inspect-ai``): one sample solved by its ReAct agent with one tool, on its OpenAI-compatible
provider (``openai-api/tito/MODEL``), not streamed.

It sends each assistant turn back with its reasoning (``reasoning_content``) and its text parts joined by a line
break as content (``"\n"`` where the answer had none). gpt-oss's chat template refuses an assistant turn with tool
calls that has both content and reasoning ("Cannot pass both content and thinking"): as SGLang applies the template
(transformers fills the template's ``thinking`` from ``reasoning_content``) and as the gateway renders it; vLLM renders
gpt-oss through harmony instead and takes such a turn (the content a commentary message, the reasoning an analysis
one). Its documented ``reasoning_history="none"`` (a ``GenerateConfig`` option) sends no reasoning back: the fix.
"""

from __future__ import annotations

from tito_audit.harnesses.harness import CHAT, DEFAULT, FIX_ROLE, PYPI, Configuration, Harness, framework_command

NO_REASONING_HISTORY = Configuration(
    'reasoning_history="none"',
    options=("reasoning_history=none",),
    role=FIX_ROLE,
    fixes="no turn goes back with both content and reasoning (gpt-oss's template refuses one with tool calls)",
)

HARNESS = Harness(
    "inspect-ai",
    "inspect-ai",
    "0.3.285",
    PYPI,
    CHAT,
    streamed=False,
    command=framework_command("inspect-ai", "drive_inspect_ai"),
    configurations=(DEFAULT, NO_REASONING_HISTORY),
    requirements=("inspect-ai==0.3.285", "openai==3.57.0"),
    venv="inspect-ai",
    preload=("inspect_ai", "inspect_ai.agent", "inspect_ai.dataset", "inspect_ai.tool"),
)
