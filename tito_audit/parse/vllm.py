"""vLLM's tool-call and reasoning parsers, by name, as vLLM 0.33's OpenAI server runs them on a finished completion.

They run in a worker process of their own (:mod:`tito_audit.parse.vllm_worker`), never in tito-audit's: importing
any vLLM module imports torch, and with torch importable transformers reports it available and takes other code
paths, so a verdict would depend on whether vLLM is installed; vLLM's metadata also pins transformers and fastapi
below ours. ``make vllm`` installs vLLM, CPU torch and what they import into ``.venv/vllm-engine``, a folder only the
worker puts on its path, after this environment's own packages (docs/vllm.md: the measured costs). Where vLLM is
importable in this environment itself (a user who serves with vLLM), the worker uses that.

What the adapter does with a completion, and so what vLLM's server does (the worker's docstring cites the files):

1. the hand-over (:meth:`VLLMParser.hand_over`): the sampled ids decoded by vLLM's own detokenizer with the settings
   the request ends up with once the parser adjusted it (``skip_special_tokens`` off for the parsers that read
   special tokens when tools are declared, else on), the stop token left out of the text (it stays in the ids);
2. the parse (:meth:`VLLMParser.parse`): vLLM's composed parser (harmony for gpt-oss) on that text and the sampled
   ids, with the prompt's ids, the request's tools and template keyword arguments (``enable_thinking``) and the
   calls earlier in the conversation; the message's fields picked as the server picks them;
3. call ids in the form vLLM writes them (``chatcmpl-tool-`` and 16 hex digits, 9 letters and digits for Mistral's
   parser, ``functions.NAME:N`` for Kimi's), with the random part derived from the completion instead of drawn, so
   that reports are reproducible;
4. the message returned is the one the next render sees: each call's ``arguments`` turned back into an object
   (vLLM's renderer turns a string that is not a JSON object into ``{}``), a ``null`` content into ``""``.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.errors import BadInputError
from tito_audit.parse.handover import Sampled, parse_input
from tito_audit.parse.parser import ParseInput, ParserUnavailable

ENGINE = "vllm"
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
    """The worker answered with an error (``kind``: names, tokenizer, parser, import, internal)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Worker:
    """One running worker process and the pipes to it; one request at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (the worker's standard error, kept while it runs)
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tito_audit.parse.vllm_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=worker_environment(),
            start_new_session=True,  # Ctrl-C reaches tito-audit, which ends the worker
        )
        self.pid = os.getpid()
        hello = self.ask({"op": "hello"}, START_SECONDS)
        self.start_seconds = time.perf_counter() - started
        self.version = str(hello.get("vllm"))
        self.import_seconds = float(hello.get("import_seconds") or 0.0)

    def ask(self, request: dict[str, Any], seconds: float = ANSWER_SECONDS) -> dict[str, Any]:
        """The worker's answer to ``request`` (raises :class:`WorkerError` for an error answer, and
        :class:`ParserUnavailable` when the worker died or took longer than ``seconds``: it is ended then)."""
        with self.lock:
            try:
                data = json.dumps(request, ensure_ascii=False).encode("utf-8")
                assert self.process.stdin is not None
                self.process.stdin.write(struct.pack(">I", len(data)) + data)
                self.process.stdin.flush()
                deadline = time.monotonic() + seconds
                (size,) = struct.unpack(">I", self._read(4, deadline))
                answer = json.loads(self._read(size, deadline))
            except BaseException as exc:  # a broken pipe, a timeout, Ctrl-C: this worker cannot be trusted again
                self.close()
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                raise ParserUnavailable(f"--parser vllm: vLLM's worker process failed ({self._why(exc)})") from None
        if "error" in answer:
            raise WorkerError(str(answer["error"]), str(answer.get("kind", "internal")))
        return answer

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
            self.process.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for stream in (self.process.stdout, self._log):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


_WORKER: _Worker | None = None
_WORKER_LOCK = threading.Lock()
_GENERATION = 0
"""How many workers this process started (a parser re-opens its model in a new one)."""


def worker() -> tuple[_Worker, int]:
    """The process's running worker (started on first use, again after it died or in a forked child) and its
    generation."""
    global _WORKER, _GENERATION
    with _WORKER_LOCK:
        if _WORKER is None or not _WORKER.alive:
            if not available():
                raise ParserUnavailable(f"--parser: vLLM's parsers are not installed; install them with: {INSTALL}")
            try:
                _WORKER = _Worker()
            except WorkerError as exc:
                raise ParserUnavailable(f"--parser vllm: {exc}; install vLLM with: {INSTALL}") from None
            _GENERATION += 1
        return _WORKER, _GENERATION


def shutdown() -> None:
    """End this process's worker, if it runs (at exit, and for tests)."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is not None:
            _WORKER.close()
            _WORKER = None


atexit.register(shutdown)


@cache
def _names() -> dict[str, list[str]]:
    running, _ = worker()
    return running.ask({"op": "names"})


def tool_parser_names() -> list[str]:
    """The tool-call parser names vLLM registers (raises :class:`ParserUnavailable` when vLLM is not installed)."""
    return list(_names()["tool"])


def reasoning_parser_names() -> list[str]:
    return list(_names()["reasoning"])


def check_names(tool: str | None, reasoning: str | None) -> None:
    """Refuse parser names vLLM does not register (:class:`BadInputError` naming ``--parser`` and the known names)."""
    for kind, name, known in (
        ("tool-call", tool, tool_parser_names()),
        ("reasoning", reasoning, reasoning_parser_names()),
    ):
        if name is not None and name not in known:
            raise BadInputError(f"--parser: unknown vLLM {kind} parser {name!r} (known: {', '.join(known)})")


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
    """vLLM's ``--tokenizer-mode`` for a folder: ``mistral`` where it holds Mistral's own tokenizer files (vLLM's
    ``auto`` picks it for a Mistral-format repository, ``tokenizers/registry.py``, which it tells by the weights this
    folder may not have), else ``auto``."""
    names = {Path(name).name for name in files}
    mistral = "tekken.json" in names or any(name.startswith("tokenizer.model.v") for name in names)
    return "mistral" if mistral else "auto"


class VLLMParser:
    """One vLLM tool-call parser and, optionally, one reasoning parser, for one model's tokenizer."""

    engine = ENGINE

    def __init__(self, tool: str | None, reasoning: str | None, model_dir: Path | None) -> None:
        if tool is None and reasoning is None:
            raise BadInputError("--parser vllm: name a tool-call parser, a reasoning parser or both")
        self.tool = tool
        self.reasoning = reasoning
        self.name = "vllm " + "+".join(part for part in (tool or "no tool parser", reasoning) if part)
        check_names(tool, reasoning)
        if model_dir is None:
            raise ParserUnavailable(f"--parser {self.name}: vLLM's parsers need the model's folder (its tokenizer)")
        self.model_dir = Path(model_dir)
        self._files = model_files(self.model_dir)
        self._key = hashlib.sha256(json.dumps(self._files, sort_keys=True).encode()).hexdigest()
        self._opened = 0
        self._lock = threading.Lock()
        self.harmony = False
        self._ask({"op": "ping"}, opening=True)

    def _ask(self, request: dict[str, Any], opening: bool = False) -> dict[str, Any]:
        running, generation = worker()
        with self._lock:
            if self._opened != generation:
                try:
                    opened = running.ask(
                        {"op": "open", "model": self._key, "files": self._files}
                        | {"tool": self.tool, "reasoning": self.reasoning}
                    )
                except WorkerError as exc:
                    if exc.kind in ("tokenizer", "import"):
                        raise ParserUnavailable(f"--parser {self.name}: {exc}") from None
                    raise BadInputError(f"--parser {self.name}: {exc}") from None
                self.harmony = bool(opened.get("harmony"))
                self._opened = generation
        if opening:
            return {}
        request = request | {"model": self._key, "tool": self.tool, "reasoning": self.reasoning}
        try:
            return running.ask(request)
        except WorkerError as exc:
            raise BadInputError(f"--parser {self.name}: vLLM's parser raised on a completion: {exc}") from None

    def hand_over(self, sampled: Sampled) -> ParseInput:
        """What vLLM's engine hands its parser for ``sampled`` (the module docstring, step 1); without ids (a caller
        with text only), the text with its stop token trimmed."""
        if not sampled.ids:
            text = sampled.text[: -len(sampled.stop)] if sampled.stopped and sampled.stop else sampled.text
            return parse_input(sampled, text)
        answer = self._ask(
            {
                "op": "hand_over",
                "ids": list(sampled.ids),
                "prompt_ids": list(sampled.prompt_ids),
                "stopped": sampled.stopped,
                "tools": sampled.tools,
                "template_kwargs": _json_safe(sampled.template_kwargs),
            }
        )
        return parse_input(sampled, str(answer["text"]))

    def parse(self, given: ParseInput) -> Message:
        answer = self._ask(
            {
                "op": "parse",
                "text": given.text,
                "ids": list(given.ids),
                "prompt_ids": list(given.prompt_ids),
                "tools": given.tools,
                "template_kwargs": _json_safe(given.template_kwargs),
                "earlier_calls": given.earlier_calls,
            }
        )
        message: Message = {"role": ASSISTANT, "content": answer.get("content") or ""}
        if answer.get("reasoning"):
            message["reasoning_content"] = answer["reasoning"]
        calls = answer.get("tool_calls") or []
        if calls:
            message["tool_calls"] = [
                {
                    "id": stable_call_id(str(call.get("id") or ""), f"{given.call_id_seed}:{index}:{call['name']}"),
                    "type": "function",
                    "function": {"name": call["name"], "arguments": rendered_arguments(call.get("arguments"))},
                }
                for index, call in enumerate(calls)
            ]
        return message


RANDOM_IDS = (
    (re.compile(r"^(chatcmpl-tool-)([0-9a-f]{16})$"), "0123456789abcdef"),
    (re.compile(r"^(call_(?:\d+_)?)([0-9a-f]{16})$"), "0123456789abcdef"),
    (re.compile(r"^()([A-Za-z0-9]{9})$"), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
)
"""The call ids vLLM draws at random (``renderers/chat_utils/tool_call.py`` ``make_tool_call_id``, the parsers that
write ``call_`` ids, ``parser/mistral.py`` ``MistralToolCall.generate_random_id``): their fixed part, and the
alphabet of their random part."""


def stable_call_id(drawn: str, seed: str) -> str:
    """``drawn`` with its random part derived from ``seed`` instead (ids a parser reads from the text, Kimi's
    ``functions.NAME:N``, stay as they are).

    >>> stable_call_id("chatcmpl-tool-0123456789abcdef", "a") == stable_call_id("chatcmpl-tool-fedcba9876543210", "a")
    True
    >>> stable_call_id("functions.ls:0", "a")
    'functions.ls:0'
    """
    for pattern, alphabet in RANDOM_IDS:
        match = pattern.match(drawn)
        if match:
            digest = hashlib.sha256(seed.encode()).digest()
            random_part = "".join(alphabet[byte % len(alphabet)] for byte in digest[: len(match.group(2))])
            return match.group(1) + random_part
    return drawn


def rendered_arguments(raw: Any) -> Any:
    """A call's arguments as vLLM's renderer hands them to the template (``renderers/chat_utils/chat_message.py``
    ``_postprocess_messages``): a JSON object string as the object, anything else (not JSON, not an object, empty) as
    ``{}``."""
    if isinstance(raw, dict):
        return raw
    if not raw or not isinstance(raw, str):
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _json_safe(values: dict[str, Any]) -> dict[str, Any]:
    """Template keyword arguments as JSON carries them (a value JSON cannot carry goes as its text)."""
    return json.loads(json.dumps(values, default=str))
