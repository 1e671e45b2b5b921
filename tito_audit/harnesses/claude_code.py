"""Claude Code (``@anthropic-ai/claude-code``): ``claude -p TASK``, Anthropic's Messages API, streamed;
``ANTHROPIC_BASE_URL`` at the gateway and a key that is never checked, telemetry and non-essential traffic off by
its documented variables. Its compaction is forced by a second prompt, ``/compact``, in the same conversation
(``--continue``). Its requests ask ``max_tokens`` 32,000 by default: a model whose context cannot hold that beside the
prompt is served with ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` set lower, its documented switch."""

from __future__ import annotations

from tito_audit.harnesses.harness import (
    COMPACTION_ROLE,
    DEFAULT,
    FIX_ROLE,
    MESSAGES,
    NPM,
    Command,
    Configuration,
    Harness,
    RolloutContext,
)

MAX_OUTPUT = "CLAUDE_CODE_MAX_OUTPUT_TOKENS=8192"
LIMITED = Configuration(
    MAX_OUTPUT, options=("max-output",), role=FIX_ROLE, fixes="its max_tokens (32,000) fits the model's context"
)
COMPACTION = Configuration(
    f"/compact after the task ({MAX_OUTPUT})", options=("compact", "max-output"), role=COMPACTION_ROLE
)


def command(context: RolloutContext, configuration: Configuration) -> Command:
    binary = str(context.installed / "npm" / "node_modules" / ".bin" / "claude")
    env = {
        "ANTHROPIC_BASE_URL": context.gateway,
        "ANTHROPIC_API_KEY": "unused",
        "ANTHROPIC_MODEL": context.model,
        "ANTHROPIC_SMALL_FAST_MODEL": context.model,
    }
    if "max-output" in configuration.options:
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = "8192"
    ask = [binary, "-p", context.task, "--model", context.model, "--max-turns", "12"]
    if "compact" not in configuration.options:
        return Command(ask, env=env)
    script = '"$@" && exec "$0" -p /compact --continue --model "$TITO_MODEL"'
    return Command(["sh", "-c", script, binary, *ask], env={**env, "TITO_MODEL": context.model})


HARNESS = Harness(
    "claude-code",
    "@anthropic-ai/claude-code",
    "2.1.197",
    NPM,
    MESSAGES,
    streamed=True,
    command=command,
    configurations=(DEFAULT, LIMITED, COMPACTION),
    label="Claude Code",
)
