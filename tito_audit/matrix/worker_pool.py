"""Worker processes for the matrix: one task at a time per worker, each worker known by what it runs.

``concurrent.futures.ProcessPoolExecutor`` does not fit a long, interruptible run: when one worker dies the whole
pool breaks and every pending task fails, there is no telling which task the dead worker ran, Ctrl-C waits for the
queued tasks to finish, and idle workers outlive a parent killed with ``kill -9``. Here:

- each worker is a spawned process with a pipe of its own; the parent hands it one task at a time and hears its
  progress events and its result on that pipe (no shared queue whose lock a killed worker could keep);
- a worker that dies (killed, out of memory) loses only its own task, which is run once more on a fresh worker; a
  task whose worker dies twice is reported as failed, with the exit status, and the others go on;
- a task may be given a wall-clock limit (``task_seconds``): a worker still on its task past it is ended and replaced,
  and the task is reported as failed with that reason (not retried: it would take as long again);
- Ctrl-C (``KeyboardInterrupt`` in the parent; the command line raises it for SIGTERM too) collects the results
  already sent, then ends every worker at once; workers ignore SIGINT and SIGTERM themselves, so a signal to the
  process group never cuts a result in half, and a worker whose parent is gone leaves without a traceback;
- a worker ends itself when its parent is gone: a thread polls ``os.getppid()`` (and an idle worker sees its pipe
  close).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

PARENT_POLL_SECONDS = 0.5
"""How often a worker checks that its parent is still there."""
WAIT_SECONDS = 0.5
"""The longest the parent waits for a message before looking at its workers again."""
ATTEMPTS = 2
"""Runs of a task whose worker died: the first and one retry on a fresh worker."""

Task = tuple[str, tuple[Any, ...]]
"""(key, arguments): the worker calls ``function(*arguments, events)``; ``events.put(event)`` reaches the parent."""


class _Events:
    """What a task's ``events`` argument is in a worker: ``put`` sends the event to the parent."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def put(self, event: Any) -> None:
        self._connection.send(("event", event))


def _watch_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)  # the parent is gone: nobody will read what this worker computes

    threading.Thread(target=watch, name="tito-audit-parent-watch", daemon=True).start()


def _serve(connection: Connection, function: Callable[..., Any], parent: int, environment: dict[str, str]) -> None:
    """A worker's life: run the tasks the parent sends until it sends None or goes away."""
    try:
        _serve_tasks(connection, function, parent, environment)
    except (BrokenPipeError, EOFError, ConnectionError):  # the parent is gone or ended this worker's pipe
        os._exit(1)


def _serve_tasks(
    connection: Connection, function: Callable[..., Any], parent: int, environment: dict[str, str]
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM are the parent's to handle
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _watch_parent(parent)
    for name, value in environment.items():
        os.environ.setdefault(name, value)
    events = _Events(connection)
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        key, arguments = message
        try:
            result = function(*arguments, events)
        except Exception as exc:  # the task's own failure: reported, the worker stays
            connection.send(("failed", key, f"{type(exc).__name__}: {exc}"))
            continue
        connection.send(("done", key, result))


@dataclass
class _Worker:
    process: Any
    connection: Connection
    task: Task | None = None
    started: float = 0.0
    """``time.monotonic()`` when the worker was given its task."""


def exit_status(code: int | None) -> str:
    """A dead process's exit code in words (``killed by SIGKILL``)."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class WorkerPool:
    """Runs ``function`` over tasks in ``size`` spawned worker processes (see the module docstring)."""

    def __init__(
        self,
        size: int,
        function: Callable[..., Any],
        environment: dict[str, str] | None = None,
        task_seconds: float | None = None,
    ) -> None:
        self.size = max(1, size)
        self.task_seconds = task_seconds if task_seconds is not None and task_seconds > 0 else None
        """Wall-clock limit of one task (None: no limit); see the module docstring."""
        self.function = function
        self.environment = dict(environment or {})
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._reading: _Worker | None = None
        """The worker whose pipe is being read: interrupted there, its pipe may hold half a message."""
        self.lost = 0
        """Workers that died while running a task."""

    def run(
        self,
        tasks: Sequence[Task],
        on_done: Callable[[str, Any], None],
        on_failed: Callable[[str, str], None],
        on_event: Callable[[Any], None] | None = None,
    ) -> None:
        """Run every task; ``on_done(key, result)`` or ``on_failed(key, reason)`` for each, as it happens."""
        queue: deque[Task] = deque(tasks)
        attempts: Counter[str] = Counter()
        try:
            while queue or any(w.task is not None for w in self._workers):
                self._assign(queue)
                busy = [w for w in self._workers if w.task is not None]
                ready = wait([w.connection for w in busy] + [w.process.sentinel for w in busy], timeout=WAIT_SECONDS)
                for worker in busy:
                    if worker.connection in ready or worker.process.sentinel in ready:
                        self._hear(worker, queue, attempts, on_done, on_failed, on_event)
                self._end_overdue(on_failed)
        except BaseException:
            self._collect_finished(on_done, on_failed)
            self._end(at_once=True)
            raise
        self._end(at_once=False)

    # -- inside ---------------------------------------------------------------------------------------------------
    def _start(self) -> _Worker:
        parent_end, child_end = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_serve,
            args=(child_end, self.function, os.getpid(), self.environment),
            name="tito-audit-worker",
            daemon=True,
        )
        process.start()
        child_end.close()
        worker = _Worker(process, parent_end)
        self._workers.append(worker)
        return worker

    def _assign(self, queue: deque[Task]) -> None:
        for worker in self._workers:
            if worker.task is None and queue:
                self._give(worker, queue.popleft())
        while queue and len(self._workers) < self.size:
            self._give(self._start(), queue.popleft())

    def _give(self, worker: _Worker, task: Task) -> None:
        worker.task = task
        worker.started = time.monotonic()
        worker.connection.send(task)

    def _end_overdue(self, on_failed: Callable[[str, str], None]) -> None:
        """End every worker still on its task past ``task_seconds``; its task fails with the reason (the next
        assignment starts a fresh worker in its place)."""
        if self.task_seconds is None:
            return
        now = time.monotonic()
        for worker in [w for w in self._workers if w.task is not None and now - w.started > self.task_seconds]:
            task = worker.task
            assert task is not None
            worker.process.kill()
            worker.process.join(timeout=5)
            self._workers.remove(worker)
            with contextlib.suppress(OSError):
                worker.connection.close()
            on_failed(
                task[0],
                f"its audit ran past the limit of {self.task_seconds:g}s per audit (--audit-seconds); its worker "
                "was ended and replaced",
            )

    def _hear(
        self,
        worker: _Worker,
        queue: deque[Task],
        attempts: Counter[str],
        on_done: Callable[[str, Any], None],
        on_failed: Callable[[str, str], None],
        on_event: Callable[[Any], None] | None,
    ) -> None:
        """Read what ``worker`` sent; a worker that died gets its task retried (once) or failed."""
        try:
            while worker.connection.poll():
                self._reading = worker
                kind, *rest = worker.connection.recv()
                self._reading = None
                if kind == "event":
                    if on_event is not None:
                        on_event(rest[0])
                    continue
                worker.task = None
                (on_done if kind == "done" else on_failed)(rest[0], rest[1])
            if worker.process.is_alive():
                return
        except (EOFError, OSError):
            pass
        self._lost(worker, queue, attempts, on_failed)

    def _lost(
        self, worker: _Worker, queue: deque[Task], attempts: Counter[str], on_failed: Callable[[str, str], None]
    ) -> None:
        worker.process.join(timeout=5)
        self._workers.remove(worker)
        with contextlib.suppress(OSError):
            worker.connection.close()
        task = worker.task
        if task is None:
            return
        self.lost += 1
        key = task[0]
        attempts[key] += 1
        status = exit_status(worker.process.exitcode)
        if attempts[key] < ATTEMPTS:
            self._give(self._start(), task)  # a fresh worker, not one that may share the dead one's trouble
            return
        on_failed(key, f"its worker process died twice ({status}), the second time on a fresh worker")

    def _collect_finished(self, on_done: Callable[[str, Any], None], on_failed: Callable[[str, str], None]) -> None:
        """Interrupted: keep the results already sent (each worker's pipe is read without waiting). A pipe the
        interrupt cut in the middle of a message is left alone: reading on would wait for bytes that are not
        coming (the rest of that message was taken for a length), for as long as the worker's next audit takes."""
        for worker in self._workers:
            if worker is self._reading:
                continue
            try:
                while worker.connection.poll():
                    kind, *rest = worker.connection.recv()
                    if kind == "done":
                        on_done(rest[0], rest[1])
                    elif kind == "failed":
                        on_failed(rest[0], rest[1])
            except (EOFError, OSError):
                continue

    def _end(self, at_once: bool) -> None:
        """Stop every worker: ask them to leave, or (interrupted) end them without waiting for their tasks."""
        workers, self._workers = self._workers, []
        for worker in workers:
            if at_once:
                worker.process.kill()
            else:
                with contextlib.suppress(OSError):
                    worker.connection.send(None)
        for worker in workers:
            worker.process.join(timeout=10)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=5)
            with contextlib.suppress(OSError):
                worker.connection.close()
