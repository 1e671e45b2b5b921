"""The gateway's side of the llama.cpp engine's process (:mod:`.llamacpp_worker` runs in it): started, asked one
JSON line at a time over its standard input and output, every wait bounded, and its end named.

The process is the gateway's child: the same process group (a signal to the group reaches it), its standard input
the gateway's pipe (closed when the gateway stops, or by the system when the gateway dies: the process then ends),
and it checks twice a second that the gateway is still its parent. Its standard error is kept (the last lines,
bounded) to name why it ended. A process that ends while asked raises :class:`EngineProcessEnded` with one line
saying how (the signal and what it usually means, or the exit status; the library's last line after an exit status or
an abort, where it says why); one that does not
answer within the timeout is killed and raises :class:`EngineProcessTimeout`.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

from tito_audit.gateway.errors import EngineProcessEnded, EngineProcessError, EngineProcessTimeout

STDERR_LINES = 20
"""Lines of the process's standard error kept to name why it ended."""
STOP_SECONDS = 5.0
"""How long a stopping process is given to end on its own before it is killed."""
SIGNALS = {
    signal.SIGILL: "illegal instruction: the llama.cpp library uses an instruction this CPU or this kernel does not "
    "run for the process; rebuild it with `make llamacpp`, which builds for AVX2 and checks",
    signal.SIGSEGV: "segmentation fault in the llama.cpp library",
    signal.SIGBUS: "bus error in the llama.cpp library",
    signal.SIGFPE: "arithmetic fault in the llama.cpp library",
    signal.SIGABRT: "the llama.cpp library aborted",
    signal.SIGKILL: "killed: the system's out-of-memory killer, or another process",
    signal.SIGTERM: "terminated by another process",
}


SAYS_WHY = frozenset({signal.SIGABRT})
"""Signals whose process says why on its standard error first (an abort's assertion): its last line is kept."""


def ending(returncode: int, last_line: str = "") -> str:
    """How a process that ended with ``returncode`` (negative: the signal) ended, in words; ``last_line`` (its
    standard error's) is added where it says why: an exit status, an abort."""
    if returncode >= 0:
        text, telling = f"exited with status {returncode}", True
    else:
        try:
            number = signal.Signals(-returncode)
        except ValueError:
            return f"died of signal {-returncode}"
        why = SIGNALS.get(number)
        text = f"died of {number.name} ({why})" if why else f"died of {number.name}"
        telling = number in SAYS_WHY
    return f"{text} (its last line: {last_line})" if last_line and telling else text


class EngineProcess:
    """One running :mod:`.llamacpp_worker` process; :meth:`ask` is not thread-safe (the engine holds a lock)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        env = dict(os.environ, TITO_AUDIT_ENGINE_PARENT=str(os.getpid()))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tito_audit.gateway.llamacpp_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.pid = self._process.pid
        self._pending = b""
        threading.Thread(target=self._keep_stderr, name=f"llamacpp-{self.pid}-stderr", daemon=True).start()
        self._finalizer = weakref.finalize(self, stop_process, self._process)

    def _keep_stderr(self) -> None:
        stream = self._process.stderr
        assert stream is not None
        for raw in stream:
            line = " ".join(raw.decode("utf-8", "replace").split())
            if line:
                self._stderr.append(line[:200])

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    def ask(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send ``request``, wait for its answer (at most ``timeout`` seconds, the process's own by default)."""
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(request, separators=(",", ":")).encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, ValueError):  # ended (ValueError: the pipe was closed by stop())
            raise self._ended() from None
        answer = json.loads(self._read_line(self.timeout if timeout is None else timeout))
        if "error" in answer:
            raise EngineProcessError(str(answer["error"]))
        return answer

    def _read_line(self, timeout: float) -> bytes:
        stdout = self._process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop(kill=True)
                raise EngineProcessTimeout(f"the llama.cpp engine process did not answer within {timeout:g} s")
            try:
                ready, _, _ = select.select([stdout], [], [], left)
            except (ValueError, OSError):  # closed by stop()
                raise self._ended() from None
            if not ready:
                continue
            chunk = os.read(stdout.fileno(), 1 << 16)
            if not chunk:
                raise self._ended()
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def _ended(self) -> EngineProcessEnded:
        try:
            returncode = self._process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:  # its output closed but it runs on: it is no engine any more
            self.stop(kill=True)
            returncode = self._process.returncode
        time.sleep(0.05)  # the last lines of its standard error
        last = self._stderr[-1] if self._stderr else ""
        return EngineProcessEnded(f"the llama.cpp engine process (pid {self.pid}) {ending(returncode, last)}")

    def stop(self, kill: bool = False) -> None:
        """End the process: its input closed (it ends by itself), killed after :data:`STOP_SECONDS` or at once."""
        stop_process(self._process, kill)
        self._finalizer.detach()


def stop_process(process: subprocess.Popen, kill: bool = False) -> None:
    """End ``process``: its input closed (a worker then ends by itself) and :data:`STOP_SECONDS` to do so, or killed
    at once with ``kill``; killed past that time; reaped."""
    if kill:
        process.kill()
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    try:
        process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
