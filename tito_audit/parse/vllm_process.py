"""vLLM's worker process, seen from tito-audit's side: where vLLM is, the worker's environment, starting it, asking it,
ending it (:mod:`tito_audit.parse.vllm_worker` is what runs inside it; :mod:`tito_audit.parse.vllm` the parser).

One worker per process, started on first use (importing vLLM takes seconds), again after it died, and anew in a forked
child; one request at a time; every request has a time limit, after which the worker is killed. A caller that will need
it soon starts it ahead (:func:`prestart`: the command line before it loads the model, a matrix worker before each
audit), so that vLLM imports on the other core while this process loads and renders; the first request then waits only
for what is left of the import. What the two sides say is typed in :mod:`tito_audit.parse.vllm_messages`. The
environment puts vLLM's folder (``make vllm``: ``.venv/vllm-engine``) after this environment's packages, through the
``sitecustomize`` of ``vllm_site/``, so that this environment's pinned packages win in the worker too.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from tito_audit.parse.parser import ParserUnavailable
from tito_audit.parse.vllm_messages import (
    HEADER,
    ErrorKind,
    Op,
    OpenAnswer,
    decode,
    encode,
    error_kind,
    hello,
    is_error,
)

VERSION = "0.33.0"
PATH_ENV = "TITO_AUDIT_VLLM_PATH"
"""A folder holding vLLM and its run-time needs apart from this environment (``make vllm`` fills one)."""
FOLDER = "vllm-engine"
"""Where ``make vllm`` puts that folder: inside the virtual environment (``.venv/vllm-engine``)."""
SITE = Path(__file__).with_name("vllm_site")
"""The folder whose ``sitecustomize`` appends the vLLM folder to a worker's path."""

INSTALL = f"make vllm (vLLM {VERSION}, CPU torch and their run-time needs in .venv/{FOLDER}; see the README)"
"""How to install the parsers without moving this environment's pins (README, "Install")."""

START_SECONDS = 300.0
"""How long the worker may take to import vLLM (about 6 s alone on 2 cores; more on a busy machine)."""
ANSWER_SECONDS = 120.0
"""How long one request may take (a tokenizer load is the longest: a few seconds)."""


def engine_folder() -> Path | None:
    """The folder the worker adds to its path for vLLM, or None when vLLM is importable here as it is."""
    given = os.environ.get(PATH_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    beside = Path(sys.prefix) / FOLDER
    return beside if (beside / "vllm").is_dir() else None


def available() -> bool:
    """Whether vLLM's parsers can run here (vLLM is found; nothing is imported: importing vLLM imports torch)."""
    folder = engine_folder()
    if folder is not None:
        return (folder / "vllm" / "__init__.py").is_file()
    return importlib.util.find_spec("vllm") is not None


def worker_environment() -> dict[str, str]:
    """The environment of a vLLM process started by tito-audit: vLLM's folder after this environment's packages,
    the CPU platform, nothing sent anywhere (usage statistics off, the hub offline: files are local)."""
    env = dict(os.environ)
    folder = engine_folder()
    if folder is not None:
        env[PATH_ENV] = str(folder)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), env.get("PYTHONPATH", "")) if p)
    env.update(
        VLLM_TARGET_DEVICE="cpu",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        VLLM_LOGGING_LEVEL=env.get("VLLM_LOGGING_LEVEL", "WARNING"),
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
    )
    return env


class WorkerError(Exception):
    """The worker answered with an error, of a :class:`~tito_audit.parse.vllm_messages.ErrorKind`."""

    def __init__(self, message: str, kind: ErrorKind) -> None:
        super().__init__(message)
        self.kind = kind


class WorkerProcess:
    """One running worker process and the pipes to it; one request at a time.

    Started without waiting: its greeting (vLLM's version, once vLLM is imported) is asked for at once and read by
    :meth:`greet`, which every request goes through first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generation = 0
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (the worker's standard error, kept while it runs)
        self._started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tito_audit.parse.vllm_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=worker_environment(),
            start_new_session=True,  # Ctrl-C reaches tito-audit, which ends the worker
        )
        self.pid = os.getpid()
        self.start_seconds = 0.0
        self.version = ""
        self.import_seconds = 0.0
        self._greeted = False
        with self.lock:
            self._send(hello())

    def greet(self) -> None:
        """Wait for the worker's greeting (vLLM imported), once; raises as :meth:`ask` does."""
        with self.lock:
            if self._greeted:
                return
            greeting = self._answer(START_SECONDS)
            self._greeted = True
        if is_error(greeting):
            raise WorkerError(str(greeting["error"]), error_kind(greeting))
        self.start_seconds = time.perf_counter() - self._started
        self.version = str(greeting.get("vllm"))
        self.import_seconds = float(greeting.get("import_seconds") or 0.0)

    def ask(self, request: Mapping[str, Any], seconds: float = ANSWER_SECONDS) -> Any:
        """The worker's answer to ``request`` (raises :class:`WorkerError` for an error answer, and
        :class:`ParserUnavailable` when the worker died or took longer than ``seconds``: it is ended then)."""
        self.greet()
        with self.lock:
            self._send(request)
            answer = self._answer(seconds)
        if is_error(answer):
            raise WorkerError(str(answer["error"]), error_kind(answer))
        return answer

    def _send(self, request: Mapping[str, Any]) -> None:
        """Write ``request`` (under :attr:`lock`)."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(encode(request))
            self.process.stdin.flush()
        except BaseException as exc:
            self._failed(exc)

    def _answer(self, seconds: float) -> Any:
        """Read the next answer (under :attr:`lock`), within ``seconds``."""
        try:
            deadline = time.monotonic() + seconds
            (size,) = HEADER.unpack(self._read(HEADER.size, deadline))
            answer = decode(self._read(size, deadline))
        except BaseException as exc:
            self._failed(exc)
        return answer

    def _failed(self, exc: BaseException) -> NoReturn:
        """A broken pipe, a timeout, Ctrl-C: this worker cannot be trusted again; it is ended."""
        self.close()
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise exc
        raise ParserUnavailable(f"--parser vllm: vLLM's worker process failed ({self._why(exc)})") from None

    def _read(self, count: int, deadline: float) -> bytes:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        chunks: list[bytes] = []
        while count:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no answer in time")
            chunk = os.read(fd, count)
            if not chunk:
                raise EOFError("it ended")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def _why(self, exc: BaseException) -> str:
        tail = self.log_tail()
        return f"{exc or type(exc).__name__}" + (f"; its last words: {tail}" if tail else "")

    def log_tail(self, size: int = 600) -> str:
        try:
            self._log.seek(0, os.SEEK_END)
            end = self._log.tell()
            self._log.seek(max(0, end - size))
            lines = self._log.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return lines[-1].strip() if lines else ""

    @property
    def alive(self) -> bool:
        return self.process.poll() is None and self.pid == os.getpid()

    def close(self) -> None:
        """End the worker (its standard input closes; it is killed if it does not end within two seconds)."""
        if self.pid != os.getpid():
            return  # a forked child's copy: the worker is its parent's
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            # still importing vLLM (started ahead, never asked): nothing of it is worth two seconds of waiting
            self.process.wait(timeout=2 if self._greeted else 0)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for stream in (self.process.stdout, self._log):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


_WORKERS: list[WorkerProcess] = []
_WORKER_LOCK = threading.Lock()
_GENERATION = 0
"""How many workers this process started (a parser opens its model in each worker it uses)."""
MAX_WORKERS = 2
"""Workers this process runs at most: a request that finds every worker busy past :data:`BUSY_SECONDS` is sent to
another (started then), so a stalled parse delays only the requests that wait on it, not every session's."""
BUSY_SECONDS = 1.0
"""How long a request waits for a busy worker before it asks another (a parse takes milliseconds)."""


def worker() -> tuple[WorkerProcess, int]:
    """A running worker of this process, one not answering another request when there is one (started on first
    use, again after one died or in a forked child, and beside a busy one that stays busy for
    :data:`BUSY_SECONDS`, up to :data:`MAX_WORKERS`), greeted, and its generation (each started worker's own
    number)."""
    running, generation = _idle_or_started()
    try:
        running.greet()
    except WorkerError as exc:
        running.close()
        raise ParserUnavailable(f"--parser vllm: {exc}; install vLLM with: {INSTALL}") from None
    return running, generation


def _idle_or_started() -> tuple[WorkerProcess, int]:
    """The worker :func:`worker` gives, not yet greeted (one started ahead is still importing vLLM)."""
    waited_until = time.monotonic() + BUSY_SECONDS
    while True:
        with _WORKER_LOCK:
            _WORKERS[:] = [running for running in _WORKERS if running.alive]
            idle = next((running for running in _WORKERS if not running.lock.locked()), None)
            if idle is not None:
                return idle, idle.generation
            if not _WORKERS or (len(_WORKERS) < MAX_WORKERS and time.monotonic() >= waited_until):
                return _started()
            if time.monotonic() >= waited_until:
                return _WORKERS[0], _WORKERS[0].generation  # every worker busy: wait for the first one
        time.sleep(0.02)


def _started() -> tuple[WorkerProcess, int]:
    """A new worker, started and not waited for, kept among this process's (under ``_WORKER_LOCK``)."""
    global _GENERATION
    if not available():
        raise ParserUnavailable(f"--parser: vLLM's parsers are not installed; install them with: {INSTALL}")
    running = WorkerProcess()
    _GENERATION += 1
    running.generation = _GENERATION
    _WORKERS.append(running)
    return running, running.generation


def prestart() -> None:
    """Start a worker of this process now, without waiting for it, when vLLM is installed and none runs: a caller
    that will ask vLLM's parsers soon lets vLLM import meanwhile (see the module docstring)."""
    with contextlib.suppress(ParserUnavailable, OSError), _WORKER_LOCK:
        _WORKERS[:] = [running for running in _WORKERS if running.alive]
        if not _WORKERS:
            _started()


def shutdown() -> None:
    """End this process's workers, if they run (at exit, and for tests)."""
    with _WORKER_LOCK:
        for running in _WORKERS:
            running.close()
        _WORKERS.clear()


atexit.register(shutdown)


class OpenedModel:
    """A model opened in this process's worker: its folder's files (name -> file) and, for a template-only model, the
    stand-in vocabulary sent with them (name -> text), with the parser pair opened on it, if any; opened again in a
    worker it has not been opened in (another started beside a busy one, or after one died; a worker keeps a few models,
    the least recently used goes)."""

    def __init__(
        self,
        files: dict[str, str],
        inline: dict[str, str] | None = None,
        tool: str | None = None,
        reasoning: str | None = None,
    ) -> None:
        self.files = files
        self.inline = dict(inline or {})
        self.tool = tool
        self.reasoning = reasoning
        self.key = hashlib.sha256(json.dumps([files, self.inline], sort_keys=True).encode()).hexdigest()
        self.opened: OpenAnswer = {}
        """The worker's answer to opening it (``tokenizer``, ``harmony``, ``mode``)."""
        self._generations: set[int] = set()
        """The workers (by generation) it is opened in: a process runs up to :data:`MAX_WORKERS`."""
        self._lock = threading.Lock()

    def open(self) -> WorkerProcess:
        """The running worker, with the model opened in it (raises :class:`WorkerError` when the worker cannot open
        it, :class:`ParserUnavailable` when there is no worker)."""
        running, generation = worker()
        with self._lock:
            if generation not in self._generations:
                body: dict[str, Any] = {"files": self.files}
                if self.inline:
                    body["inline"] = self.inline
                self.opened = self.ask(running, Op.OPEN, body)
                self._generations.add(generation)
        return running

    def ask(self, running: WorkerProcess, op: Op, body: Mapping[str, Any]) -> Any:
        """The answer of ``running`` (the worker :meth:`open` gave) to operation ``op`` about this model: ``body``
        (the operation's own fields, ``vllm_messages.<Op>Body``) with the model's key and parser pair."""
        return running.ask({"op": op, "model": self.key, "tool": self.tool, "reasoning": self.reasoning, **body})


def model_files(model_dir: Path) -> dict[str, str]:
    """The files of a model's folder by name, git symlink stubs followed (the worker links them into a folder of its
    own: vLLM reads the tokenizer from one folder)."""
    from tito_audit.model.resolve import follow_symlink_stub

    files = {}
    for item in sorted(model_dir.rglob("*")):
        if item.is_file() and ".git" not in item.parts:
            files[item.relative_to(model_dir).as_posix()] = str(follow_symlink_stub(item).resolve())
    return files


def tokenizer_mode(files: dict[str, str]) -> str:
    """vLLM's ``--tokenizer-mode`` for a folder, as its server's ``auto`` resolves it: the mode of the encoder vLLM
    renders the architecture ``config.json`` names with (``deepseek_v4``: ``config/model.py``; see
    :mod:`tito_audit.model.engine_rendered`); ``mistral`` where the folder holds Mistral's own tokenizer files (vLLM's
    ``auto`` picks it for a Mistral-format repository, ``tokenizers/registry.py``, which it tells by the weights this
    folder may not have); else ``auto``."""
    from tito_audit.model.engine_rendered import encoder_of_folder

    encoder = encoder_of_folder({name: Path(path) for name, path in files.items()})
    if encoder is not None:
        return encoder.mode
    names = {Path(name).name for name in files}
    mistral = "tekken.json" in names or any(name.startswith("tokenizer.model.v") for name in names)
    return "mistral" if mistral else "auto"
