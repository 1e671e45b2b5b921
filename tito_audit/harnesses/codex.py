"""Codex CLI (``@openai/codex``): ``codex exec TASK``, OpenAI's Responses API, streamed; a model provider pointing at
the gateway in its ``config.toml`` (``base_url``, ``wire_api = "responses"``, the key from an environment variable),
as its configuration documentation gives it; analytics, metrics export, update checks, remote model lists, plugins and
apps off there. Its auto-compaction is forced with ``model_auto_compact_token_limit`` set a little past its first
prompt (measured on the default configuration's rollouts in the same group)."""

from __future__ import annotations

from tito_audit.harnesses.harness import (
    COMPACTION_ROLE,
    DEFAULT,
    NPM,
    RESPONSES,
    Command,
    Configuration,
    Harness,
    RolloutContext,
)

COMPACTION = Configuration("auto-compaction forced", options=("compact",), role=COMPACTION_ROLE)
COMPACT_AFTER = 270
"""Tokens past the first prompt (its instructions and tools) at which the forced compaction sets in: after a turn or
two of the task, and never again at once after it (the summary and the first prompt stay below it)."""


def _compaction(context: RolloutContext, configuration: Configuration) -> list[str]:
    if "compact" not in configuration.options:
        return []
    first = context.first_prompt or 4500
    return [f"model_auto_compact_token_limit = {first + COMPACT_AFTER}"]


def command(context: RolloutContext, configuration: Configuration) -> Command:
    config = "\n".join(
        [
            f'model = "{context.model}"',
            'model_provider = "tito"',
            "check_for_update_on_startup = false",
            *_compaction(context, configuration),
            "",
            "[model_providers.tito]",
            'name = "tito"',
            f'base_url = "{context.gateway}/v1"',
            'env_key = "TITO_API_KEY"',
            'wire_api = "responses"',
            "",
            "[analytics]",
            "enabled = false",
            "",
            "[otel]",
            'exporter = "none"',
            'metrics_exporter = "none"',
            "",
            "[features]",
            "remote_models = false",
            "plugins = false",
            "apps = false",
            "",
        ]
    )
    binary = str(context.installed / "npm" / "node_modules" / ".bin" / "codex")
    return Command(
        [binary, "exec", "--skip-git-repo-check", context.task],
        env={"CODEX_HOME": str(context.home / ".codex"), "TITO_API_KEY": "unused"},
        files={".codex/config.toml": config},
    )


HARNESS = Harness(
    "codex",
    "@openai/codex",
    "0.171.0",
    NPM,
    RESPONSES,
    streamed=True,
    command=command,
    configurations=(DEFAULT, COMPACTION),
    label="Codex CLI",
)
