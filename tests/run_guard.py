"""Two guards that let a test run end, and say what it was doing (a pytest plugin, loaded by ``conftest.py``).

- Where each test process is: with ``TITO_AUDIT_TEST_STATUS=FOLDER`` (``.ci/run`` sets it), each test process (each
  xdist worker, or the one process) writes ``FOLDER/<worker>`` as each test starts: its pid, the test and when it
  started. When ``.ci/run``'s bound for the whole run fires, it prints these files: what was running, and since when.
- Nothing a dead worker started outlives it: under xdist the controller adopts the processes a worker leaves behind
  when it dies (Linux's child subreaper), and kills those that carry that worker's mark (``TITO_AUDIT_TEST_WORKER``:
  the controller's pid and the worker's name, set in each worker as it starts, so that every process it starts
  inherits it) when that worker goes down, then any left when the run ends. Tests' servers also die with their test
  process (:mod:`tests.watched`); this catches the rest (a server started with plain ``subprocess``, a server's own
  children).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.watched import children

STATUS_ENV = "TITO_AUDIT_TEST_STATUS"
WORKER_ENV = "PYTEST_XDIST_WORKER"
MARK_ENV = "TITO_AUDIT_TEST_WORKER"
PR_SET_CHILD_SUBREAPER = 36
SWEEP_ROUNDS = 5


def _status_file() -> Path | None:
    folder = os.environ.get(STATUS_ENV)
    if not folder:
        return None
    return Path(folder) / os.environ.get(WORKER_ENV, "main")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    path = _status_file()
    if path is not None:
        started = time.strftime("%H:%M:%S")
        _write(path, f"{path.name} (pid {os.getpid()}) since {started}: {item.nodeid}\n")
    yield
    if path is not None:
        _write(path, f"{path.name} (pid {os.getpid()}): between tests, after {item.nodeid}\n")


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError:  # a status that cannot be written must not fail a test
        pass


def _is_xdist_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and bool(config.getoption("numprocesses", None))


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: the mark its processes inherit
        os.environ[MARK_ENV] = f"{os.getppid()}:{workerinput['workerid']}"
    elif _is_xdist_controller(config) and sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object | None) -> None:
    """A worker went down: kill what it left behind (at once when it died, else what its tests forgot)."""
    gateway = getattr(node, "gateway", None)
    worker = getattr(gateway, "id", None)
    if worker:
        sweep(str(worker))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_xdist_controller(config) and sys.platform.startswith("linux"):
        sweep(None)


def sweep(worker: str | None) -> list[int]:
    """Kill this process's children that carry ``worker``'s mark (any of this run's workers' if None), round after
    round as their own children are adopted in turn; the pids killed."""
    killed: list[int] = []
    mine = f"{os.getpid()}:"
    for _ in range(SWEEP_ROUNDS):
        found = []
        for pid in children(os.getpid()):
            mark = _mark(pid)
            if mark is not None and mark.startswith(mine) and (worker is None or mark == mine + worker):
                found.append(pid)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)  # adopted: this process reaps it
            except (ProcessLookupError, ChildProcessError):
                pass
            killed.append(pid)
        time.sleep(0.2)  # their children are adopted next
    return killed


def _mark(pid: int) -> str | None:
    """The mark ``pid`` was started with (``controller-pid:worker``), or None."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{MARK_ENV}=".encode()
    for pair in environ.split(b"\0"):
        if pair.startswith(prefix):
            return pair[len(prefix) :].decode(errors="replace")
    return None
