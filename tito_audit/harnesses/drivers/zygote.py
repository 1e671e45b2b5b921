"""A framework's Python, warmed up once: ``python zygote.py SOCKET MODULE...`` imports the framework's modules, then
forks a fresh process for each rollout asked of it over the Unix socket ``SOCKET``, so that a rollout pays no import.

Run by the Python of a harness's own virtual environment (standard library only: nothing of tito-audit is there).
A rollout is asked as one JSON line: ``{"argv": [SCRIPT, ...], "env": {...}, "cwd": DIR, "stdout": FILE, "stderr":
FILE}``. The zygote forks a waiter, which forks the rollout and answers ``{"pid": PID}`` then, when it ends,
``{"exit": CODE}``. The rollout runs ``SCRIPT`` as ``python SCRIPT ...`` would (its folder first on the path, ``argv``
as given, run as ``__main__``) in a session of its own (the caller ends it with its process group), in ``cwd``, with
exactly ``env`` as its environment, its standard input empty and its output in the two files. The harness's code runs
as it ships: only the interpreter's start (the imports) is shared.

The zygote prints ``tito-zygote-ready`` once it listens, and stops when its standard input closes (its caller went
away).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import traceback

READY = "tito-zygote-ready"
"""What the zygote prints once it listens (after whatever its imports print)."""


def run_rollout(request: dict, connection: socket.socket, listener: socket.socket) -> None:
    """In the forked rollout: become the process ``request`` asks for, run its script, exit with its code."""
    listener.close()
    connection.close()
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115 - the rollout's own, over /dev/null
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        argv = [str(a) for a in request["argv"]]
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        try:
            runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                print(stop.code, file=sys.stderr)
                code = 1
    except BaseException:  # the rollout's own failure: its traceback in its output, as python would print it
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def wait_for(request: dict, connection: socket.socket, listener: socket.socket) -> None:
    """In the forked waiter: fork the rollout, say its pid, wait for it, say how it ended."""
    listener.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        run_rollout(request, connection, listener)
    code = 1
    try:
        connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        connection.sendall(json.dumps({"exit": code}).encode() + b"\n")
    except OSError:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    finally:
        os._exit(0)


def read_request(connection: socket.socket) -> dict | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def main(path: str, modules: list[str]) -> None:
    for name in modules:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the system
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print(READY, flush=True)
    while True:  # one thread only: a fork copies no lock another thread holds
        readable, _, _ = select.select([listener, sys.stdin.fileno()], [], [])
        if sys.stdin.fileno() in readable and not os.read(sys.stdin.fileno(), 4096):
            return  # the caller went away
        if listener not in readable:
            continue
        connection, _ = listener.accept()
        try:
            request = read_request(connection)
            if request is not None and os.fork() == 0:
                wait_for(request, connection, listener)
        finally:
            connection.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
