"""One interface for every harness: what it is (package, pinned version, dialect, streamed or not), the
configurations it runs in, and the command line of one rollout.

A harness is run as it ships: its default configuration first; where that loses sampled ids, the configurations
it documents that do not (or a gateway option) run too, and the row names the one that brings the share back, with
its figure (:attr:`Configuration.fixes`). A rollout is one process: a CLI harness's own binary, or a framework's small
driver (``drivers/NAME.py``) run by the Python of the harness's own virtual environment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

NPM = "npm"
PYPI = "pypi"
CHAT = "chat"
RESPONSES = "responses"
MESSAGES = "messages"


@dataclass(frozen=True)
class RolloutContext:
    """What one rollout is given."""

    gateway: str
    """The gateway's base URL (``http://127.0.0.1:PORT``, no ``/v1``)."""
    model: str
    workdir: Path
    """The rollout's task folder (its current directory)."""
    home: Path
    """A home folder of its own (the harness's settings, caches and logs go there)."""
    installed: Path
    """Where :mod:`tito_audit.harnesses.install` put the harnesses."""
    task: str
    rollout: int
    first_prompt: int | None = None
    """The tokens of the first prompt the harness's default configuration sent in this group (what a compaction
    threshold is set from), when it ran before."""


@dataclass(frozen=True)
class Command:
    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    """Files to write before the rollout, relative to the home folder (a provider's configuration)."""


@dataclass(frozen=True)
class Configuration:
    name: str
    """``default``, or what it changes (``--tools Bash,Read``)."""
    options: tuple[str, ...] = ()
    """Harness options this configuration passes (read by the harness's ``command``)."""
    gateway_options: Mapping[str, object] = field(default_factory=dict)
    """Gateway settings it changes (:class:`~tito_audit.gateway.gateway.GatewayConfig` fields)."""
    fixes: str = ""
    """What it brings back (a harness action or a cause the default loses ids to); empty for the default."""
    role: str = "default"
    """``default`` (always run), ``compaction`` (always run: the harness's own compaction forced) or ``fix`` (run
    where the default keeps less than every sampled id, to show what brings it back)."""


DEFAULT = Configuration("default")
COMPACTION_ROLE = "compaction"
FIX_ROLE = "fix"


@dataclass(frozen=True)
class Harness:
    name: str
    package: str
    """The registry package (``@openai/codex``, ``openai-agents``)."""
    version: str
    source: str
    """``npm`` or ``pypi``."""
    dialect: str
    streamed: bool
    command: Callable[[RolloutContext, Configuration], Command]
    configurations: tuple[Configuration, ...] = (DEFAULT,)
    requirements: tuple[str, ...] = ()
    """Pinned PyPI requirements of its virtual environment (the package first)."""
    label: str = ""
    """How the table names it (``openai-agents (Responses)``); default: ``name``."""
    venv: str = ""
    """A PyPI harness's virtual environment (``venv-NAME`` where it is installed; two rows of one package share one)."""

    @property
    def title(self) -> str:
        return self.label or self.name


def driver(name: str) -> str:
    """The path of a framework's driver script."""
    return str(Path(__file__).parent / "drivers" / f"{name}.py")


SESSION_ID = "session id"
"""The configuration option of a framework driver that sends an ``X-Session-Id`` header (none does by default)."""
WITH_SESSION_ID = Configuration(
    "X-Session-Id sent", options=(SESSION_ID,), fixes="each rollout names its session", role=FIX_ROLE
)


def framework_command(venv: str, script: str, *arguments: str) -> Callable[[RolloutContext, Configuration], Command]:
    """The command of a framework's rollout: its driver run by the Python of its own virtual environment."""

    def command(context: RolloutContext, configuration: Configuration) -> Command:
        python = context.installed / f"venv-{venv}" / "bin" / "python"
        env = {"TITO_BASE_URL": f"{context.gateway}/v1", "TITO_MODEL": context.model, "TITO_TASK": context.task}
        if SESSION_ID in configuration.options:
            env["TITO_SESSION"] = f"{venv}-{script}-{'-'.join(arguments)}-{context.rollout}"
        return Command([str(python), driver(script), *arguments], env=env)

    return command
