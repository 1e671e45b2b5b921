"""One group of the harness matrix: every harness asked of it, against one gateway (one model, one engine parser) in
front of the stand-in engine, each rollout in a task folder and a home of its own; what comes out is, per harness and
configuration, how each rollout ended and the gateway's own record of every session it opened (``GET /sessions``,
then ``GET /sessions/{id}``), summed into a row by :mod:`.rows`.

It runs as ``python -m tito_audit.harnesses.group SPEC.json OUT.json`` inside a network namespace of its own
(:mod:`.isolation`), the gateway and the engine in this process, the harnesses as child processes: nothing they do can
reach another host, and whatever they try through their proxy settings is recorded and fails the run.

The gateway runs with its default options (the configuration's own, where it names one), the engine shaped as the
parser's engine serves (``--engine-api vllm`` for vLLM's parsers, ``sglang`` for SGLang's).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.harnesses.catalogue import harness_named
from tito_audit.harnesses.harness import Configuration, Harness, RolloutContext
from tito_audit.harnesses.isolation import ProxyTrap, harness_env
from tito_audit.harnesses.task import TASK, home_folder, task_folder
from tito_audit.outputs import write_atomically

ROLLOUT_SECONDS = 90
"""The longest a rollout may take before it is stopped (and counted as failed)."""
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
    first_prompts: dict[str, int] = field(default_factory=dict)
    """Per harness, the first prompt's tokens of its default configuration when that cell is stored already."""

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
            data.get("first_prompts") or {},
        )


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
        "turns": sum(1 for turn in record.get("turns", []) if turn.get("sampled")),
        "branches": max(len(branches), 1),
        "branch_makers": [b.get("made_by") for b in branches if b.get("made_by")],
        "break_makers": [b.get("made_by") for b in record.get("breaks", []) if b.get("made_by")]
        + [m for b in branches for m in (b.get("break_makers") or [])],
        "trainable": record.get("trainable") or {"sampled": 0, "in_loss": 0, "lost": {}},
        "found": [f.get("how") if isinstance(f, dict) else f for f in record.get("found") or []],
        "unsampled": len(record.get("unsampled") or []),
        "first_prompt": next((t["completion"][0] for t in record.get("turns", []) if t.get("completion")), None),
    }


@contextmanager
def gateway_for(spec: GroupSpec, options: dict[str, Any]) -> Iterator[str]:
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
    with running(Gateway(config)) as url:
        yield url


def run_cell(
    spec: GroupSpec, harness: Harness, configuration: Configuration, url: str, trap: ProxyTrap, first: int | None = None
) -> dict:
    started = time.monotonic()
    before = set(session_ids(url))
    rollouts = []
    for number in range(spec.rollouts):
        slug = re.sub(
            r"[^A-Za-z0-9._-]+", "_", f"{spec.model}-{spec.parser}-{harness.name}-{configuration.name}-{number}"
        )
        context = RolloutContext(
            url,
            spec.model,
            task_folder("work", slug),
            home_folder(slug),
            Path(spec.installed),
            TASK,
            number,
            first,
        )
        rollouts.append(run_rollout(harness, configuration, context, trap))
    records = [summary(_get(f"{url}/sessions/{sid}")) for sid in session_ids(url) if sid not in before]
    return {
        "harness": harness.name,
        "configuration": configuration.name,
        "rollouts": rollouts,
        "sessions": records,
        "seconds": round(time.monotonic() - started, 1),
    }


def run_rollout(harness: Harness, configuration: Configuration, context: RolloutContext, trap: ProxyTrap) -> dict:
    command = harness.command(context, configuration)
    for relative, text in command.files.items():
        path = context.home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (context.home / "tmp").mkdir(exist_ok=True)
    env = harness_env(trap, str(context.home), command.env)
    started = time.monotonic()
    try:
        done = subprocess.run(
            command.argv,
            cwd=context.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=ROLLOUT_SECONDS,
            check=False,
        )
        code: int | None = done.returncode
        out, err = done.stdout, done.stderr
    except subprocess.TimeoutExpired as timeout:
        code, out, err = None, timeout.stdout or b"", timeout.stderr or b""
    except OSError as exc:
        code, out, err = 127, b"", str(exc).encode()
    return {
        "exit": code,
        "seconds": round(time.monotonic() - started, 1),
        "network": trap.taken(),
        "stdout": out.decode("utf-8", "replace")[-TAIL:],
        "stderr": err.decode("utf-8", "replace")[-TAIL:],
    }


def run_group(spec: GroupSpec) -> list[dict]:
    trap = ProxyTrap()
    cells = []
    gateways: dict[str, str] = {}
    first_prompts: dict[str, int | None] = dict(spec.first_prompts)
    with ExitStack() as stack:
        for harness_name, configuration_name in spec.cells:
            harness = harness_named(harness_name)
            configuration = configuration_named(harness, configuration_name)
            options = dict(configuration.gateway_options)
            key = json.dumps(options, sort_keys=True)
            if key not in gateways:
                gateways[key] = stack.enter_context(gateway_for(spec, options))
            cell = run_cell(spec, harness, configuration, gateways[key], trap, first_prompts.get(harness.name))
            if configuration.name == "default":
                sizes = [s["first_prompt"] for s in cell["sessions"] if s.get("first_prompt")]
                first_prompts[harness.name] = min(sizes) if sizes else None
            cells.append(cell)
    trap.close()
    return cells


def main(argv: list[str]) -> int:
    spec = GroupSpec.read(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    cells = run_group(spec)
    write_atomically(Path(argv[1]), json.dumps(cells, ensure_ascii=False, indent=1).encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
