"""Processes a test starts and watches: code that can kill its process (a native library's kernels, a server) runs in
a child, so that a crash is one failed test naming its cause, never a dead test worker; and every child dies with the
process that started it (the parent-death signal), so that nothing a test started outlives it, even when the test's
own process is killed before its ``finally`` runs."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

PR_SET_PDEATHSIG = 1
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
"""Looked up here, not in the child: a child forked from a process with threads calls nothing that may take a lock."""


def popen(command: Sequence[str], **options: Any) -> subprocess.Popen:
    """``subprocess.Popen`` of a child that the system kills (SIGKILL) when the thread that started it ends (on
    Linux: the parent-death signal; a test's thread ends with its process)."""
    parent = os.getpid()

    def die_with_parent() -> None:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was set
            os._exit(1)

    return subprocess.Popen(list(command), preexec_fn=die_with_parent, **options)


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"died of {signal.Signals(-returncode).name}"
        except ValueError:
            return f"died of signal {-returncode}"
    return f"exited with status {returncode}"


def run_python(
    code: str, timeout: float, what: str, *args: str, input: str | None = None, **options: Any
) -> subprocess.CompletedProcess:
    """Run ``code`` (with ``args`` as its ``sys.argv[1:]``) in a new Python process that dies with this one (given
    ``input`` on its standard input), at most ``timeout`` seconds; a process that does not end in time, or ends with a
    status other than 0, fails the test in one line naming ``what`` it did, how it ended (the signal: SIGILL for an
    instruction this CPU does not run) and the last lines it wrote."""
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    process = popen([sys.executable, "-c", code, *args], text=True, **pipes, **options)
    try:
        out, err = process.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"{what}: still running after {timeout:g} s (killed); its last lines: {_tail(err or out)}")
    if process.returncode != 0:
        pytest.fail(f"{what}: the process {how_it_ended(process.returncode)}; its last lines: {_tail(err or out)}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def children(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` now (read from ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a process that ended and was not reaped yet, a zombie, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-3:])[-600:] or "(none)"
