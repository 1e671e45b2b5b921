"""Worker processes for the matrix: one task at a time per worker, each worker known by what it runs.

``concurrent.futures.ProcessPoolExecutor`` does not fit a long, interruptible run: when one worker dies the whole
pool breaks and every pending task fails, there is no telling which task the dead worker ran, Ctrl-C waits for the
queued tasks to finish, and idle workers outlive a parent killed with ``kill -9``. Here:

- each worker is a spawned process with a pipe of its own; the parent hands it one task at a time and hears its
  progress events and its result on that pipe (no shared queue whose lock a killed worker could keep);
- a worker that dies (killed, out of memory) loses only its own task, which is run once more on a fresh worker; a
  task whose worker dies twice is reported as failed, with the exit status, and the others go on;
- a task may be given a limit of CPU time (``task_cpu_seconds``): the work its worker process does on it, whatever
  else the machine runs (a wall-clock limit ended honest audits that were only slow on a busy machine). A worker
  whose task passes it ends itself with :data:`OVER_LIMIT` (a thread of its own watches its CPU time); the task is
  reported as failed with that reason (not retried: it would take as long again) and a fresh worker takes the next;
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
OVER_LIMIT = 86
"""The exit code of a worker that ended itself because its task passed its CPU-time limit."""
LIMIT_POLL_SECONDS = 0.25
"""How often a worker looks at the CPU time its task has taken."""

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


class _CpuLimit:
    """The CPU time this worker process has spent on its current task, watched by a thread of its own: past
    ``seconds`` the process ends with :data:`OVER_LIMIT` (the task's work is this process's: every thread of it)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._started: float | None = None
        if seconds is not None:
            threading.Thread(target=self._watch, name="tito-audit-cpu-limit", daemon=True).start()

    def begin(self) -> None:
        self._started = time.process_time()

    def end(self) -> None:
        self._started = None

    def _watch(self) -> None:
        assert self.seconds is not None
        while True:
            time.sleep(LIMIT_POLL_SECONDS)
            started = self._started
            if started is not None and time.process_time() - started > self.seconds:
                os._exit(OVER_LIMIT)


def _serve(
    connection: Connection,
    function: Callable[..., Any],
    parent: int,
    environment: dict[str, str],
    cpu_seconds: float | None = None,
) -> None:
    """A worker's life: run the tasks the parent sends until it sends None or goes away."""
    try:
        _serve_tasks(connection, function, parent, environment, cpu_seconds)
    except (BrokenPipeError, EOFError, ConnectionError):  # the parent is gone or ended this worker's pipe
        os._exit(1)


def _serve_tasks(
    connection: Connection,
    function: Callable[..., Any],
    parent: int,
    environment: dict[str, str],
    cpu_seconds: float | None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM are the parent's to handle
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _watch_parent(parent)
    limit = _CpuLimit(cpu_seconds)
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
        limit.begin()
        try:
            result = function(*arguments, events)
        except Exception as exc:  # the task's own failure: reported, the worker stays
            limit.end()
            connection.send(("failed", key, f"{type(exc).__name__}: {exc}"))
            continue
        limit.end()
        connection.send(("done", key, result))


@dataclass
class WorkerProcess:
    process: Any
    connection: Connection
    task: Task | None = None


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
        task_cpu_seconds: float | None = None,
    ) -> None:
        self.size = max(1, size)
        self.task_cpu_seconds = task_cpu_seconds if task_cpu_seconds is not None and task_cpu_seconds > 0 else None
        """CPU-time limit of one task in its worker (None: no limit); see the module docstring."""
        self.function = function
        self.environment = dict(environment or {})
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[WorkerProcess] = []
        self._reading: WorkerProcess | None = None
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
        except BaseException:
            self._collect_finished(on_done, on_failed)
            self._end(at_once=True)
            raise
        self._end(at_once=False)

    # -- inside ---------------------------------------------------------------------------------------------------
    def _start(self) -> WorkerProcess:
        parent_end, child_end = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_serve,
            args=(child_end, self.function, os.getpid(), self.environment, self.task_cpu_seconds),
            name="tito-audit-worker",
            daemon=True,
        )
        process.start()
        child_end.close()
        worker = WorkerProcess(process, parent_end)
        self._workers.append(worker)
        return worker

    def _assign(self, queue: deque[Task]) -> None:
        for worker in self._workers:
            if worker.task is None and queue:
                self._give(worker, queue.popleft())
        while queue and len(self._workers) < self.size:
            self._give(self._start(), queue.popleft())

    def _give(self, worker: WorkerProcess, task: Task) -> None:
        worker.task = task
        worker.connection.send(task)

    def _hear(
        self,
        worker: WorkerProcess,
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
        self, worker: WorkerProcess, queue: deque[Task], attempts: Counter[str], on_failed: Callable[[str, str], None]
    ) -> None:
        worker.process.join(timeout=5)
        self._workers.remove(worker)
        with contextlib.suppress(OSError):
            worker.connection.close()
        task = worker.task
        if task is None:
            return
        key = task[0]
        if worker.process.exitcode == OVER_LIMIT:  # not retried: it would take as long again
            on_failed(
                key,
                f"its audit ran past the limit of {self.task_cpu_seconds:g} CPU seconds per audit (--audit-seconds); "
                "its worker was ended and replaced",
            )
            return
        self.lost += 1
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
