"""qwen-code (``@qwen-code/qwen-code``): ``qwen -p TASK``, OpenAI chat completions, streamed; the OpenAI provider
pointed at the gateway by ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``OPENAI_MODEL``, usage statistics and
telemetry off in its ``settings.json``."""

from __future__ import annotations

import json

from tito_audit.harnesses.harness import CHAT, DEFAULT, NPM, Command, Configuration, Harness, RolloutContext

SETTINGS = {"usageStatisticsEnabled": False, "telemetry": {"enabled": False}, "checkForUpdates": False}


def command(context: RolloutContext, configuration: Configuration) -> Command:
    binary = str(context.installed / "npm" / "node_modules" / ".bin" / "qwen")
    env = {
        "OPENAI_BASE_URL": f"{context.gateway}/v1",
        "OPENAI_API_KEY": "unused",
        "OPENAI_MODEL": context.model,
    }
    return Command([binary, "-p", context.task], env=env, files={".qwen/settings.json": json.dumps(SETTINGS)})


HARNESS = Harness(
    "qwen-code", "@qwen-code/qwen-code", "0.15.10", NPM, CHAT, streamed=True, command=command, configurations=(DEFAULT,)
)
