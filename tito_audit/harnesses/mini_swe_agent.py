"""mini-swe-agent (PyPI ``mini-swe-agent``): its ``mini`` command on a task, yolo mode, exiting when the agent
finishes; litellm's OpenAI provider pointed at the gateway (``api_base``). Two rows: its tool-calling configuration
(``mini.yaml``, the default: a ``bash`` tool) and its text-based one (``mini_textbased.yaml``, model class
``litellm_textbased``: commands in fenced blocks, no tools), not streamed. Its ``mini`` script is run by the Python
of its virtual environment (``python .../bin/mini``, as the script's own first line says)."""

from __future__ import annotations

from collections.abc import Callable

from tito_audit.harnesses.harness import (
    CHAT,
    DEFAULT,
    PYPI,
    Command,
    Configuration,
    Harness,
    RolloutContext,
    venv_python,
)

REQUIREMENTS = ("mini-swe-agent==2.4.6",)
PRELOAD = ("minisweagent.run.mini", "litellm")


def _command(config: str, model_class: str) -> Callable[[RolloutContext, Configuration], Command]:
    def command(context: RolloutContext, configuration: Configuration) -> Command:
        mini = context.installed / "venv-mini-swe-agent" / "bin" / "mini"
        argv = [
            venv_python(context, "mini-swe-agent"),
            str(mini),
            "-c",
            config,
            "-c",
            f"model.model_kwargs.api_base={context.gateway}/v1",
            "-c",
            "model.model_kwargs.api_key=unused",
            "-c",
            "model.cost_tracking=ignore_errors",
            "-c",
            "agent.step_limit=12",
            "-m",
            f"openai/{context.model}",
            "-t",
            context.task,
            "--yolo",
            "--exit-immediately",
            "-o",
            str(context.home / "trajectory.json"),
        ]
        if model_class:
            argv[2:2] = ["--model-class", model_class]
        return Command(argv, env={"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors"})

    return command


TOOL_CALLING = Harness(
    "mini-swe-agent",
    "mini-swe-agent",
    "2.4.6",
    PYPI,
    CHAT,
    streamed=False,
    command=_command("mini.yaml", ""),
    configurations=(DEFAULT,),
    requirements=REQUIREMENTS,
    venv="mini-swe-agent",
    label="mini-swe-agent (tool calling)",
    preload=PRELOAD,
)
TEXT_BASED = Harness(
    "mini-swe-agent-text",
    "mini-swe-agent",
    "2.4.6",
    PYPI,
    CHAT,
    streamed=False,
    command=_command("mini_textbased.yaml", "litellm_textbased"),
    configurations=(DEFAULT,),
    requirements=REQUIREMENTS,
    venv="mini-swe-agent",
    label="mini-swe-agent (text-based)",
    preload=PRELOAD,
)
