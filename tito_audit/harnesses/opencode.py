"""opencode (``opencode-ai``): ``opencode run TASK``, OpenAI chat completions through its OpenAI-compatible provider,
streamed; the provider and model in its ``opencode.json`` (``baseURL`` at the gateway; no ``npm`` package named, so
that it takes the provider it bundles rather than installing one), sharing, auto-updates and default plugins off. It
asks ``max_tokens`` 32,000 of a model whose limits it does not know: where that does not fit beside the prompt, the
model's ``limit`` in ``opencode.json`` (its documented key) brings it down."""

from __future__ import annotations

import json

from tito_audit.harnesses.harness import CHAT, DEFAULT, FIX_ROLE, NPM, Command, Configuration, Harness, RolloutContext

OUTPUT_LIMIT = Configuration(
    "limit.output 8192 in opencode.json",
    options=("output-limit",),
    role=FIX_ROLE,
    fixes="its max_tokens (32,000 for a model it knows no limit of) fits the model's context",
)


def _model(configuration: Configuration) -> dict:
    model: dict = {"name": "the model the gateway serves"}
    if "output-limit" in configuration.options:
        model["limit"] = {"context": 32768, "output": 8192}
    return model


def command(context: RolloutContext, configuration: Configuration) -> Command:
    binary = str(context.installed / "npm" / "node_modules" / ".bin" / "opencode")
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"tito/{context.model}",
        "provider": {
            "tito": {
                "name": "tito",
                "options": {"baseURL": f"{context.gateway}/v1", "apiKey": "unused"},
                "models": {context.model: _model(configuration)},
            }
        },
    }
    return Command(
        [binary, "run", context.task],
        files={".config/opencode/opencode.json": json.dumps(config)},
    )


HARNESS = Harness(
    "opencode",
    "opencode-ai",
    "1.18.33",
    NPM,
    CHAT,
    streamed=True,
    command=command,
    configurations=(DEFAULT, OUTPUT_LIMIT),
)
