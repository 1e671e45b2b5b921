"""One interface for every harness: what it is (package, pinned version, dialect, streamed or not), the
configurations it runs in, and the command line of one rollout.

A harness is run as it ships: its default configuration first; where that loses sampled ids, the configurations
it documents that do not (or a gateway option) run too, and the row names the one that brings the share back, with
its figure (:attr:`Configuration.fixes`). A rollout is one process: a CLI harness's own binary, or a framework's small
driver (``drivers/NAME.py``) run by the Python of the harness's own virtual environment (forked from one that has
imported the framework's :attr:`Harness.preload` modules already: :mod:`.zygotes`).
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


@dataclass(frozen=True)
class Command:
    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    """Files to write before the rollout, relative to the home folder (a provider's configuration)."""
    links: Mapping[str, str] = field(default_factory=dict)
    """Symbolic links to make before the rollout, relative to the home folder, to what they point at (something
    installed beside the harnesses)."""


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
    companions: tuple[str, ...] = ()
    """What a fix configuration puts where the harness looks for it, installed with the harness in folders of their
    own: ``npm:NAME@VERSION`` (into ``npm-HARNESS``), ``pypi:NAME==VERSION`` (into a virtual environment,
    ``venv-HARNESS``)."""
    preload: tuple[str, ...] = ()
    """The modules a PyPI harness's rollouts import at start: imported once per lane, each rollout forked from there."""

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


def venv_python(context: RolloutContext, venv: str) -> str:
    """The Python of a PyPI harness's own virtual environment."""
    return str(context.installed / f"venv-{venv}" / "bin" / "python")


@dataclass(frozen=True)
class FrameworkCommand:
    """The command of a framework's rollout: its driver (``drivers/SCRIPT.py``) run by the Python of its own virtual
    environment; a configuration's ``NAME=VALUE`` options reach the driver as ``TITO_OPTION_NAME`` (what it passes
    the framework)."""

    venv: str
    script: str
    arguments: tuple[str, ...] = ()

    def __call__(self, context: RolloutContext, configuration: Configuration) -> Command:
        env = {"TITO_BASE_URL": f"{context.gateway}/v1", "TITO_MODEL": context.model, "TITO_TASK": context.task}
        if SESSION_ID in configuration.options:
            env["TITO_SESSION"] = f"{self.venv}-{self.script}-{'-'.join(self.arguments)}-{context.rollout}"
        for option in configuration.options:
            name, equals, value = option.partition("=")
            if equals:
                env[f"TITO_OPTION_{name.upper()}"] = value
        return Command([venv_python(context, self.venv), driver(self.script), *self.arguments], env=env)


def framework_command(venv: str, script: str, *arguments: str) -> FrameworkCommand:
    return FrameworkCommand(venv, script, arguments)
