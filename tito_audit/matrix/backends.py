"""Where a matrix's work runs: this process, a pool of worker processes, or Ray.

Every backend runs the same module-level functions of :mod:`tito_audit.matrix.tasks` and hands each outcome to
the driver as soon as it exists (the driver stores it at once, which is what makes a run resumable).

Ray is an install extra (``pip install 'tito-audit[ray]'``): ``ray.init()`` starts a local instance, or joins
the cluster named by ``RAY_ADDRESS``; the workers must have tito-audit installed and see the mirror folders
(or reach the Hub) under the same paths.
"""

from __future__ import annotations

import contextlib
import os
import queue
from collections.abc import Callable
from typing import Any, Protocol

from tito_audit.errors import BadInputError
from tito_audit.matrix.matrix_options import LOCAL, RAY, MatrixOptions
from tito_audit.matrix.row import AUDIT_ERROR, base_row
from tito_audit.matrix.tasks import Identity, PairOutcome, ProgressEvent, audit_pair, identify_many
from tito_audit.matrix.worker_pool import WorkerPool

OnOutcome = Callable[[PairOutcome], None]
OnEvent = Callable[[ProgressEvent], None] | None

IDENTIFY_BATCH = 64
"""Model ids per identify task on Ray (one id per task would cost more in scheduling than in work)."""


class Backend(Protocol):
    def identify(self, model_ids: list[str], options: MatrixOptions) -> list[Identity]: ...

    def audit(self, model_ids: list[str], options: MatrixOptions, on_outcome: OnOutcome, on_event: OnEvent) -> None:
        """Audit each id (the first id of each pair to audit); ``on_outcome`` gets every outcome as it comes."""
        ...


def backend_for(options: MatrixOptions) -> Backend:
    if options.backend == LOCAL:
        return LocalBackend()
    if options.backend == RAY:
        return RayBackend()
    raise BadInputError(f"--backend {options.backend}: choose local or ray")


WORKER_ENVIRONMENT = {"TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error"}


def _worker_failed(model_id: str, reason: str) -> PairOutcome:
    return PairOutcome(model_id, failure=base_row(model_id, AUDIT_ERROR, f"worker failed: {reason}"))


class LocalBackend:
    """Identification in this process (it only reads and hashes files); audits in ``options.jobs`` spawned
    worker processes (:class:`~tito_audit.matrix.worker_pool.WorkerPool`), or in this process when ``jobs`` is 1."""

    def identify(self, model_ids: list[str], options: MatrixOptions) -> list[Identity]:
        return identify_many(model_ids, options)

    def audit(self, model_ids: list[str], options: MatrixOptions, on_outcome: OnOutcome, on_event: OnEvent) -> None:
        if options.jobs <= 1 or len(model_ids) <= 1:
            events: queue.Queue[ProgressEvent] = queue.Queue()
            for model_id in model_ids:
                outcome = audit_pair(model_id, options, events)
                _drain(events, on_event)
                on_outcome(outcome)
            return
        pool = WorkerPool(
            min(options.jobs, len(model_ids)),
            audit_pair,
            WORKER_ENVIRONMENT,
            task_cpu_seconds=options.audit_seconds,
        )
        pool.run(
            [(model_id, (model_id, options)) for model_id in model_ids],
            on_done=lambda model_id, outcome: on_outcome(outcome),
            on_failed=lambda model_id, reason: on_outcome(_worker_failed(model_id, reason)),
            on_event=on_event,
        )


def _drain(events: Any, on_event: OnEvent) -> None:
    while True:
        try:
            event = events.get_nowait()
        except (queue.Empty, EOFError, OSError):
            return
        if on_event is not None:
            on_event(event)


class RayBackend:
    """Identify and audit tasks on Ray; results come back to the driver, which alone writes the store."""

    def _ray(self, options: MatrixOptions) -> Any:
        try:
            import ray
        except ImportError as exc:
            raise BadInputError("--backend ray needs Ray: pip install 'tito-audit[ray]'") from exc
        if not ray.is_initialized():
            settings: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "runtime_env": {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error"}},
            }
            if not os.environ.get("RAY_ADDRESS"):
                settings["num_cpus"] = options.jobs
            try:
                ray.init(**settings)
            except Exception as exc:
                raise BadInputError(f"--backend ray: Ray did not start: {type(exc).__name__}: {exc}") from exc
        return ray

    def identify(self, model_ids: list[str], options: MatrixOptions) -> list[Identity]:
        ray = self._ray(options)
        task = ray.remote(num_cpus=1)(identify_many)
        batches = [model_ids[i : i + IDENTIFY_BATCH] for i in range(0, len(model_ids), IDENTIFY_BATCH)]
        return [identity for batch in ray.get([task.remote(b, options) for b in batches]) for identity in batch]

    def audit(self, model_ids: list[str], options: MatrixOptions, on_outcome: OnOutcome, on_event: OnEvent) -> None:
        if not model_ids:
            return
        ray = self._ray(options)
        task = ray.remote(num_cpus=1, max_retries=2)(audit_pair)
        pending = {task.remote(model_id, options, None): model_id for model_id in model_ids}
        try:
            self._collect(ray, pending, on_outcome)
        except KeyboardInterrupt:  # Ctrl-C: what finished is stored; the rest is cancelled, not waited for
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise

    def _collect(self, ray: Any, pending: dict[Any, str], on_outcome: OnOutcome) -> None:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                model_id = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as exc:  # a worker or node lost beyond its retries
                    outcome = _worker_failed(model_id, f"{type(exc).__name__}: {exc}")
                on_outcome(outcome)
