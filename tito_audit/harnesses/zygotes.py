"""Framework rollouts without an import each: one warmed-up Python per framework's virtual environment
(``drivers/zygote.py``: it imports the framework once, then forks a fresh process per rollout), kept for a lane's
life (:mod:`.lane`).

Importing a framework is most of a short rollout (litellm alone takes about 4 s of CPU, inspect-ai 2 s): forking a
process that has imported it already runs the same harness code from the same start, without paying that again. The
rollout is still a process of its own, in its task folder, with its own environment and home, its output in files;
:meth:`Zygotes.run` gives back what :func:`subprocess.run` would (exit code, output, or a time-out).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tito_audit.harnesses.harness import driver

START_SECONDS = 120
"""How long a zygote may take to import its framework (seconds; a busy machine is slow)."""
READY = b"tito-zygote-ready"
"""What ``drivers/zygote.py`` prints once it listens."""


@dataclass(frozen=True)
class Ended:
    """How a rollout ended: its exit code (None: stopped at its time limit) and what it printed."""

    code: int | None
    stdout: bytes
    stderr: bytes


class Zygote:
    """One warmed-up Python (see the module docstring)."""

    def __init__(self, python: str, modules: Sequence[str], env: Mapping[str, str], folder: Path) -> None:
        name = f"z{len(os.listdir(folder))}"
        self.socket_path = str(folder / f"{name}.sock")
        errors = folder / f"{name}.err"
        with errors.open("wb") as stderr:
            self.process = subprocess.Popen(
                [python, driver("zygote"), self.socket_path, *modules],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=dict(env),
                cwd=folder,
            )
        assert self.process.stdout is not None
        for line in self.process.stdout:  # what the framework prints as it imports, then the zygote's word
            if line.strip() == READY:
                return
        self.close()
        said = _read(errors).decode("utf-8", "replace").strip()[-600:]
        raise RuntimeError(f"the zygote of {python} did not start: {said}")

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        timeout: float,
        started: Callable[[int], None] = lambda pid: None,
    ) -> Ended:
        """Run one rollout (``argv[0]`` a Python script) in a forked process, as :func:`subprocess.run` would;
        ``started`` is told its pid (it leads a process group of its own)."""
        with tempfile.TemporaryDirectory(prefix="tito-rollout-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request = {"argv": list(argv), "env": dict(env), "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
            code = self._ask(request, timeout, started)
            return Ended(code, _read(out), _read(err))

    def _ask(self, request: dict, timeout: float, started: Callable[[int], None]) -> int | None:
        deadline = time.monotonic() + timeout
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(self.socket_path)
            connection.sendall(json.dumps(request).encode() + b"\n")
            reader = connection.makefile("rb")
            connection.settimeout(START_SECONDS)
            pid = int(json.loads(reader.readline())["pid"])
            started(pid)
            try:
                connection.settimeout(max(deadline - time.monotonic(), 0.01))
                line = reader.readline()
            except TimeoutError:
                line = b""
            if not line:  # the time limit passed (or the waiter went away): the rollout and its children end
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                return None
            return int(json.loads(line)["exit"])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


class Zygotes:
    """The lane's zygotes, one per virtual environment, each started on first use and closed with the lane."""

    def __init__(self, folder: Path, env: Mapping[str, str]) -> None:
        self.folder = folder
        self.env = dict(env)
        self._started: dict[str, Zygote] = {}

    def get(self, python: str, modules: Sequence[str]) -> Zygote:
        if python not in self._started:
            self._started[python] = Zygote(python, modules, self.env, self.folder)
        return self._started[python]

    def close(self) -> None:
        for zygote in self._started.values():
            zygote.close()
        self._started.clear()
