"""One group of the harness matrix (one model, one engine parser): every harness asked of it, each cell against a
gateway and a stand-in engine of its own (so that a cell samples the same whatever ran before it), each rollout in a
task folder and a home of its own; what comes out is, per harness and
configuration, how each rollout ended and the gateway's own record of every session it opened (``GET /sessions``,
then ``GET /sessions/{id}``), summed into a row by :mod:`.rows`.

A group runs inside a lane (:mod:`.lane`): in a network namespace of its own (:mod:`.isolation`), the gateway and
the engine in the lane's process, the harnesses as child processes (a framework's forked from a Python that imported
it already: :mod:`.zygotes`): nothing they do can reach another host, and whatever they try through their proxy
settings is recorded and fails the run. A harness whose default configuration keeps less than every sampled id has
its fix configurations run right after it, in the same group, one after another until one keeps every id.

The gateway runs with its default options (the configuration's own, where it names one), the engine shaped as the
parser's engine serves (``--engine-api vllm`` for vLLM's parsers, ``sglang`` for SGLang's).

A rollout ends at its time limit, or as soon as its harness has resent a request the cell's gateway refused,
unchanged and refused the same way, :data:`RESENDS` times (the gateway tells of it: :mod:`tito_audit.gateway.resends`):
such a harness only loops, and how often it gets round before a time limit depends on the machine's speed, not on
the harness. The harness is stopped before that last refusal is answered, so that it asks nothing more, and the
rollout's record says what it resent (:func:`tito_audit.harnesses.rows.row_of` names it as the row's failure).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tito_audit.gateway.resends import Resends, Resent
from tito_audit.harnesses.catalogue import harness_named
from tito_audit.harnesses.harness import DEFAULT, FIX_ROLE, Command, Configuration, Harness, RolloutContext
from tito_audit.harnesses.isolation import ProxyTrap, harness_env
from tito_audit.harnesses.task import TASK, home_folder, task_folder
from tito_audit.harnesses.zygotes import Ended, Zygotes

ROLLOUT_SECONDS = 60
"""The longest a rollout may take before it is stopped (and counted as failed): a few times what the slowest rollout
that finishes takes on a busy machine."""
RESENDS = 3
"""Times a harness may resend a refused request unchanged before its rollout is ended. No client retries a request
refused for what it is (a 400 or 422: the SDKs retry 408, 409, 429 and 5xx only, twice by default), so a second send
already shows a loop; three resends leave room for a harness that retries any error once or twice on its own, and
take a second or two."""
TAIL = 400


@dataclass(frozen=True)
class GroupSpec:
    model: str
    parser: str
    """``sglang`` or ``vllm``: the engine whose documented parser the gateway uses (the engine takes its shape)."""
    cells: list[tuple[str, str]]
    """(harness name, configuration name) to run."""
    rollouts: int
    seed: int
    mirrors: list[str]
    installed: str
    fixes: list[str] = field(default_factory=list)
    """Harnesses whose fix configurations run right after their default here, if it keeps less than every id."""
    chains: list[tuple[str, list[str]]] = field(default_factory=list)
    """(harness, fix configurations) to run after the cells (a default stored already keeps less than every id)."""

    @classmethod
    def read(cls, data: dict[str, Any]) -> GroupSpec:
        return cls(
            data["model"],
            data["parser"],
            [(str(c[0]), str(c[1])) for c in data["cells"]],
            data["rollouts"],
            data["seed"],
            data["mirrors"],
            data["installed"],
            list(data.get("fixes") or []),
            [(str(h), [str(c) for c in names]) for h, names in data.get("chains") or []],
        )


@dataclass
class Runner:
    """What runs a group's rollouts: the lane's proxy trap and its zygotes (None: each rollout a process of its own)."""

    trap: ProxyTrap
    zygotes: Zygotes | None = None
    resends: Resends | None = None
    """The cell's gateway's watchers of refused requests sent again unchanged (None: rollouts end at their time
    limit only)."""


@dataclass(frozen=True)
class CellGateway:
    """A cell's gateway, running: where it serves, and who watches its refusals."""

    url: str
    resends: Resends


class RolloutStop:
    """Ends a rollout's process from the gateway's thread when its harness resends a refused request
    :data:`RESENDS` times (thread-safe: the process may start after the word comes, or end before it)."""

    def __init__(self) -> None:
        self.resent: Resent | None = None
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._group = False

    def started(self, pid: int, group: bool = False) -> None:
        """The rollout's process is ``pid`` (``group``: the leader of a process group of its own)."""
        with self._lock:
            self._pid, self._group = pid, group
            stopping = self.resent is not None
        if stopping:
            self._kill()

    def ended(self) -> None:
        with self._lock:
            self._pid = None

    def resend_seen(self, resent: Resent) -> None:
        with self._lock:
            self.resent = resent
        self._kill()

    def _kill(self) -> None:
        with self._lock:
            pid, group = self._pid, self._group
            if pid is None:
                return
            with contextlib.suppress(OSError):
                if group:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)


Emit = Callable[[Harness, Configuration, dict], None]
"""Told of each cell as soon as it has run (the lane writes it out)."""


def configuration_named(harness: Harness, name: str) -> Configuration:
    return next(c for c in harness.configurations if c.name == name)


def _get(url: str) -> Any:
    import httpx

    return httpx.get(url, timeout=60, trust_env=False).json()


def session_ids(url: str) -> list[str]:
    """Every session the gateway lists, in the order they opened."""
    found: list[str] = []
    after: Any = None
    while True:
        page = _get(f"{url}/sessions?limit=1000" + (f"&after={after}" if after is not None else ""))
        found += [entry["session"] for entry in page.get("sessions", [])]
        after = page.get("next")
        if after is None:
            return found


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """What a row needs of a session's record."""
    branches = record.get("branches") or []
    return {
        "requests": record.get("requests", 0),
        "turns": _sampled_turns(record, branches),
        "branches": max(len(branches), 1),
        "branch_makers": _branch_makers(branches),
        "break_makers": _break_makers(record, branches),
        "trainable": record.get("trainable") or {"sampled": 0, "in_loss": 0, "lost": {}},
        "found": [f.get("how") if isinstance(f, dict) else f for f in record.get("found") or []],
        "unsampled": len(record.get("unsampled") or []),
    }


def _sampled_turns(record: dict[str, Any], branches: list[dict[str, Any]]) -> int:
    """The answers the engine sampled for a session, each once: with branches, the sampled turns each branch owns
    (the record's top level lists only its active branch's turns, those it shares with its parent among them)."""
    if branches:
        return sum(1 for b in branches for turn in b.get("turns", []) if turn.get("sampled") and turn.get("in_loss"))
    return sum(1 for turn in record.get("turns", []) if turn.get("sampled"))


def _break_makers(record: dict[str, Any], branches: list[dict[str, Any]]) -> list[Any]:
    """Who made each break of a session: each branch's own, when it has branches (the record lists its active
    branch's breaks at its top level too, so those count there once); else the record's."""
    if branches:
        return [m for b in branches for m in (b.get("break_makers") or [])]
    return [b.get("made_by") for b in record.get("breaks", []) if b.get("made_by")]


def _branch_makers(branches: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """Who made each branch of a session but the session's own (the one branch no one is named for: its first, or
    the loop a side request came before); a further branch no one is named for is listed as None (unattributed)."""
    named = [b["made_by"] for b in branches if b.get("made_by")]
    unnamed = sum(1 for b in branches if not b.get("made_by"))
    return [*named, *([None] * max(unnamed - 1, 0))]


@contextmanager
def gateway_for(spec: GroupSpec, options: dict[str, Any]) -> Iterator[CellGateway]:
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    api = "vllm" if spec.parser == "vllm" else "sglang"
    config = GatewayConfig(
        spec.model,
        engine="standin",
        engine_api=api,
        parser=spec.parser,
        seed=spec.seed,
        mirrors=tuple(spec.mirrors),
        allow_hub=False,
        **options,
    )
    gateway = Gateway(config)
    with running(gateway) as url:
        yield CellGateway(url, gateway.resends)


def run_cell(spec: GroupSpec, harness: Harness, configuration: Configuration, url: str, runner: Runner) -> dict:
    started = time.monotonic()
    rollouts: list[dict] = []
    for number in range(spec.rollouts):
        if rollouts and (rollouts[-1]["exit"] != 0 or rollouts[-1]["network"]):
            break  # a rollout failed: the row fails whatever the others do, and a harness that fails so fails again
        slug = re.sub(
            r"[^A-Za-z0-9._-]+", "_", f"{spec.model}-{spec.parser}-{harness.name}-{configuration.name}-{number}"
        )
        context = RolloutContext(
            url, spec.model, task_folder("work", slug), home_folder(slug), Path(spec.installed), TASK, number
        )
        rollouts.append(run_rollout(harness, configuration, context, runner))
    records = [summary(_get(f"{url}/sessions/{sid}")) for sid in session_ids(url)]  # the cell's gateway is its own
    return {
        "harness": harness.name,
        "configuration": configuration.name,
        "planned": spec.rollouts,
        "rollouts": rollouts,
        "sessions": records,
        "seconds": round(time.monotonic() - started, 1),
    }


def run_rollout(harness: Harness, configuration: Configuration, context: RolloutContext, runner: Runner) -> dict:
    started = time.monotonic()
    try:
        command = harness.command(context, configuration)
        _prepare_home(context.home, command)
    except OSError as exc:  # something the configuration needs is not installed
        ended = Ended(127, b"", f"{exc} (make harnesses-install installs what the harnesses need)".encode())
    else:
        env = harness_env(runner.trap, str(context.home), command.env)
        stop = RolloutStop()
        watching = runner.resends.watch(RESENDS, stop.resend_seen) if runner.resends else contextlib.nullcontext()
        with watching:
            ended = _run(harness, command.argv, env, context.workdir, runner.zygotes, stop)
    rollout: dict[str, Any] = {
        "exit": ended.code,
        "seconds": round(time.monotonic() - started, 1),
        "network": runner.trap.taken(),
        "stdout": ended.stdout.decode("utf-8", "replace")[-TAIL:],
        "stderr": ended.stderr.decode("utf-8", "replace")[-TAIL:],
    }
    if stop.resent is not None:
        rollout["resent"] = asdict(stop.resent)
    return rollout


def _prepare_home(home: Path, command: Command) -> None:
    """The files and links a command needs in its home folder, and its ``tmp``."""
    for relative, text in command.files.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for relative, source in command.links.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(source)
    (home / "tmp").mkdir(exist_ok=True)


def _run(
    harness: Harness, argv: list[str], env: dict[str, str], cwd: Path, zygotes: Zygotes | None, stop: RolloutStop
) -> Ended:
    """One rollout's process: forked from the framework's zygote where there is one, else started anew; ``stop``
    knows its pid while it runs."""
    try:
        if zygotes is not None and harness.preload:
            zygote = zygotes.get(argv[0], harness.preload)
            return zygote.run(argv[1:], env, cwd, ROLLOUT_SECONDS, lambda pid: stop.started(pid, group=True))
        return _run_process(argv, env, cwd, stop)
    except (OSError, RuntimeError, ValueError) as exc:
        return Ended(127, b"", str(exc).encode())
    finally:
        stop.ended()


def _run_process(argv: list[str], env: dict[str, str], cwd: Path, stop: RolloutStop) -> Ended:
    """Run ``argv`` as :func:`subprocess.run` would with a time limit (None for its code when stopped there)."""
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        stop.started(process.pid)
        try:
            stdout, stderr = process.communicate(timeout=ROLLOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            return Ended(None, stdout or b"", stderr or b"")
        return Ended(process.returncode, stdout, stderr)


def kept_share(cell: dict) -> float:
    """The share of a cell's sampled ids in the loss, 0 when a rollout did not finish or reached for another host (as
    the row counts it: :func:`tito_audit.harnesses.rows.trainable_share`)."""
    rollouts = cell.get("rollouts") or []
    if any(r.get("exit") != 0 or r.get("network") for r in rollouts):
        return 0.0
    sampled = sum(int(s["trainable"].get("sampled") or 0) for s in cell.get("sessions") or [])
    in_loss = sum(int(s["trainable"].get("in_loss") or 0) for s in cell.get("sessions") or [])
    return in_loss / sampled if sampled else 0.0


def run_group(spec: GroupSpec, runner: Runner, emit: Emit) -> None:
    """Run the group's cells (and, after a default that keeps less than every id, its harness's fixes), telling
    ``emit`` of each as it ends."""

    def run(harness: Harness, configuration: Configuration) -> dict:
        # A gateway and a stand-in engine of the cell's own (a few hundredths of a second: the model's machinery is
        # kept per process): the engine counts what it was asked to tell the rollouts of one prompt apart, and the
        # gateway finds sessions by their conversations, so that what ran before would change this cell's draws.
        with gateway_for(spec, dict(configuration.gateway_options)) as gateway:
            watched = replace(runner, resends=gateway.resends) if runner is not None else runner
            cell = run_cell(spec, harness, configuration, gateway.url, watched)
        emit(harness, configuration, cell)
        return cell

    def chain(harness: Harness, fixes: list[Configuration]) -> None:
        for fix in fixes:  # in the harness's order, until one keeps every id
            if kept_share(run(harness, fix)) >= 1:
                return

    for harness_name, configuration_name in spec.cells:
        harness = harness_named(harness_name)
        configuration = configuration_named(harness, configuration_name)
        cell = run(harness, configuration)
        if configuration.name == DEFAULT.name and harness.name in spec.fixes and kept_share(cell) < 1:
            chain(harness, [c for c in harness.configurations if c.role == FIX_ROLE])
    for harness_name, names in spec.chains:
        harness = harness_named(harness_name)
        chain(harness, [configuration_named(harness, name) for name in names])
