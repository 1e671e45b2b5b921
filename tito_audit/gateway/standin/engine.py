"""``--engine standin`` and ``--engine standin:SEED``: the stand-in model served on 127.0.0.1 by this process, and the
gateway's HTTP engine talking to it as to vLLM or SGLang (``--engine-api``), token ids in and out, through the same
code as a real engine (requests, streaming, stop ids, log-probabilities, the engine's parser on the completion)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from tito_audit.errors import BadInputError
from tito_audit.gateway.sampling_engines import HttpEngine
from tito_audit.gateway.standin.model import StandinModel
from tito_audit.gateway.standin.server import StandinServer
from tito_audit.session.machinery import Machinery

STANDIN = "standin"
ENGINE_FORMS = "an http(s):// URL, llamacpp:PATH, standin[:SEED] or 'fake'"
"""What ``--engine`` takes."""


def check_engine_option(engine: str) -> None:
    """Refuse (exit 2, one line) an ``--engine`` none of :data:`ENGINE_FORMS` spells, before the model loads."""
    if engine != "fake" and not engine.startswith(("http://", "https://", "llamacpp:", STANDIN)):
        raise BadInputError(f"--engine must be {ENGINE_FORMS}, not {engine!r}")


class EngineSettings(Protocol):
    """What the stand-in engine reads of the gateway's settings."""

    engine: str
    engine_api: str
    engine_timeout: float
    max_sessions: int
    seed: int


def standin_engine(config: EngineSettings, machinery: Machinery, served_name: str) -> StandinEngine | None:
    """The stand-in engine ``config.engine`` names (None: it names another); raises ValueError for a bad seed."""
    seed = standin_seed(config.engine, config.seed)
    if seed is None:
        return None
    return StandinEngine(machinery, seed, config.engine_api, config.engine_timeout, config.max_sessions, served_name)


def standin_seed(engine: str, default: int) -> int | None:
    """The seed ``--engine`` gives the stand-in engine (``standin``: ``default``, the ``--seed``; ``standin:SEED``:
    SEED); None when it names another engine. Raises ValueError for a seed that is not an integer."""
    if engine == STANDIN:
        return default
    if not engine.startswith(STANDIN + ":"):
        return None
    text = engine[len(STANDIN) + 1 :]
    if not text.lstrip("-").isdigit():
        raise ValueError(f"--engine standin:SEED needs an integer seed, not {text!r}")
    return int(text)


class StandinEngine(HttpEngine):
    """The stand-in model's server and the HTTP engine that asks it; :meth:`close` stops both."""

    def __init__(
        self,
        machinery: Machinery,
        seed: int,
        api: str,
        timeout: float,
        connections: int,
        served_name: str,
        clock: datetime | None = None,
    ) -> None:
        self.server = StandinServer(StandinModel(machinery, seed, clock), served_name)
        try:
            super().__init__(self.server.url, api, timeout, connections)
        except BaseException:
            self.server.close()
            raise
        self.name = f"standin (seed {seed}, {api}-shaped at {self.server.url})"

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            self.server.close()
