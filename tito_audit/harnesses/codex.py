"""Codex CLI (``@openai/codex``): ``codex exec TASK``, OpenAI's Responses API, streamed; a model provider pointing at
the gateway in its ``config.toml`` (``base_url``, ``wire_api = "responses"``, the key from an environment variable),
as its configuration documentation gives it; analytics, metrics export, update checks, remote model lists, plugins and
apps off there. Its auto-compaction is forced with ``model_auto_compact_token_limit = 1``: Codex compacts after every
response that goes on with a tool call (it sends the history with no tools and a request for a handoff summary, then
restarts from the summary), so a rollout compacts until the model answers."""

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

COMPACT_LIMIT = 1
"""The lowest token limit: every response past it that needs a follow-up (a tool call) is followed by a compaction."""
COMPACTION = Configuration(
    f"auto-compaction forced (model_auto_compact_token_limit = {COMPACT_LIMIT})",
    options=("compact",),
    role=COMPACTION_ROLE,
)


def _compaction(configuration: Configuration) -> list[str]:
    return [f"model_auto_compact_token_limit = {COMPACT_LIMIT}"] if "compact" in configuration.options else []


def command(context: RolloutContext, configuration: Configuration) -> Command:
    config = "\n".join(
        [
            f'model = "{context.model}"',
            'model_provider = "tito"',
            "check_for_update_on_startup = false",
            *_compaction(configuration),
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
