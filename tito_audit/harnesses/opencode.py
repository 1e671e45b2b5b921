"""opencode (``opencode-ai``): ``opencode run TASK``, OpenAI chat completions through its bundled OpenAI-compatible
provider, streamed; the provider and model in its ``opencode.json`` (``baseURL`` at the gateway), sharing and
auto-updates off."""

from __future__ import annotations

import json

from tito_audit.harnesses.harness import CHAT, DEFAULT, NPM, Command, Configuration, Harness, RolloutContext


def command(context: RolloutContext, configuration: Configuration) -> Command:
    binary = str(context.installed / "npm" / "node_modules" / ".bin" / "opencode")
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"tito/{context.model}",
        "provider": {
            "tito": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "tito",
                "options": {"baseURL": f"{context.gateway}/v1", "apiKey": "unused"},
                "models": {context.model: {"name": context.model}},
            }
        },
    }
    return Command(
        [binary, "run", *configuration.options, context.task],
        files={".config/opencode/opencode.json": json.dumps(config)},
    )


HARNESS = Harness(
    "opencode", "opencode-ai", "1.18.33", NPM, CHAT, streamed=True, command=command, configurations=(DEFAULT,)
)
