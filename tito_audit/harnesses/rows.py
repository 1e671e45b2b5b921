"""A row of the harness matrix, summed from the gateway's own record of every session a harness opened.

Per harness × configuration × model × parser: the rollouts and how they ended, the requests and turns, the ids the
engine sampled and those in the loss of a training sample (the record's ``trainable``), the sessions and branches,
the ids lost by cause, who made each branch beyond a session's own (the harness, and what it did to its history: its
actions; ``unattributed`` for one the gateway named no maker for) and each break (template, parser, BPE: the record's
``made_by``), how the gateway found each request's session, and any attempt to reach another host. Nothing here is
measured again: it is what the gateway said.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from tito_audit.harnesses.harness import Configuration, Harness

HARNESS_MAKER = "harness"
UNATTRIBUTED = "unattributed"
"""A branch beyond a session's own that the record names no maker for."""


def _maker_label(made_by: Any) -> tuple[str, str]:
    """(maker, what: the harness's action or the cause label) of a ``made_by`` entry."""
    if not isinstance(made_by, dict):
        return UNATTRIBUTED, ""
    maker = str(made_by.get("maker") or "unknown")
    what = made_by.get("action") if maker == HARNESS_MAKER else made_by.get("cause")
    return maker, str(what or "")


def row_of(harness: Harness, configuration: Configuration, model: str, parser: str, cell: dict) -> dict[str, Any]:
    sessions = cell.get("sessions") or []
    rollouts = cell.get("rollouts") or []
    sampled = sum(int(s["trainable"].get("sampled") or 0) for s in sessions)
    in_loss = sum(int(s["trainable"].get("in_loss") or 0) for s in sessions)
    lost: Counter[str] = Counter()
    for session in sessions:
        for cause, ids in (session["trainable"].get("lost") or {}).items():
            lost[cause] += ids if isinstance(ids, int) else len(ids) if isinstance(ids, list) else 0
    branch_makers: Counter[str] = Counter()
    break_makers: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    for session in sessions:
        for made_by in session.get("branch_makers", []):
            maker, what = _maker_label(made_by)
            branch_makers[maker] += 1
            if maker == HARNESS_MAKER:
                actions[what] += 1
        for made_by in session.get("break_makers", []):
            maker, what = _maker_label(made_by)
            break_makers[maker] += 1
            causes[f"{maker}: {what}"] += 1
    network = sorted({without_host(attempt) for rollout in rollouts for attempt in rollout.get("network") or []})
    finished = sum(1 for r in rollouts if r.get("exit") == 0)
    failures = [_failure(r, harness.title) for r in rollouts if r.get("exit") != 0]
    planned = max(int(cell.get("planned") or 0), len(rollouts))
    if len(rollouts) < planned:
        failures.append(f"{planned - len(rollouts)} more rollout(s) not run after one failed")
    return {
        "harness": harness.title,
        "name": harness.name,
        "package": harness.package,
        "version": harness.version,
        "dialect": harness.dialect,
        "streamed": harness.streamed,
        "configuration": configuration.name,
        "role": configuration.role,
        "fixes": configuration.fixes,
        "model": model,
        "parser": parser,
        "rollouts": planned,
        "finished": finished,
        "sessions": len(sessions),
        "requests": sum(int(s.get("requests") or 0) for s in sessions),
        "turns": sum(int(s.get("turns") or 0) for s in sessions),
        "branches": sum(int(s.get("branches") or 0) for s in sessions),
        "sampled": sampled,
        "in_loss": in_loss,
        "share": round(in_loss / sampled, 4) if sampled else None,
        "lost": dict(sorted(lost.items())),
        "made_by": dict(sorted(branch_makers.items())),
        "breaks": dict(sorted(break_makers.items())),
        "causes": dict(sorted(causes.items())),
        "history": dict(sorted(actions.items())),
        "found": dict(sorted(Counter(how for s in sessions for how in s.get("found", []) if how).items())),
        "unsampled": sum(int(s.get("unsampled") or 0) for s in sessions),
        "network": network,
        "failure": "; ".join(failures) if failures else None,
        "seconds": cell.get("seconds"),
    }


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\\x1b\[[0-9;]*[A-Za-z]")
"""Terminal colour codes (and their escaped form) in what a harness printed."""


def _failure(rollout: dict, harness: str) -> str:
    """One line: how a rollout that did not finish ended, and the last line it wrote (or, for one ended because its
    harness resent a refused request unchanged, :mod:`.group`, that request's refusal)."""
    resent = rollout.get("resent")
    if resent:
        refusal = f"{resent['status']} {resent['code']}: {resent['message']}"
        return f"{harness} resent a refused request {resent['times']} times ({refusal[:240]}); rollout ended"
    code = rollout.get("exit")
    how = "stopped after the rollout's time limit" if code is None else f"exit {code}"
    text = ANSI.sub("", rollout.get("stderr") or rollout.get("stdout") or "")
    lines = [line.strip() for line in text.splitlines()]
    last = next((line for line in reversed(lines) if line), "")
    return f"{how}: {last[:200]}" if last else how


def failed(row: dict[str, Any]) -> bool:
    """A rollout did not finish, or one reached for another host."""
    return bool(row["network"]) or row["finished"] < row["rollouts"]


def trainable_share(row: dict[str, Any]) -> float:
    """The row's share of sampled ids in the loss (0 when nothing was sampled or a rollout failed or reached out)."""
    if row["network"] or row["finished"] < row["rollouts"] or not row["sampled"]:
        return 0.0
    return float(row["share"] or 0.0)


def percent(share: float) -> str:
    return f"{share * 100:.1f}%".replace(".0%", "%")


def shown_share(row: dict[str, Any]) -> str:
    """The trainable share, or for a failed row the share of what it sampled that is in the loss and that it failed
    (a trainer keeps no failed rollout)."""
    if not failed(row):
        return percent(row["trainable"])
    kept = percent(row["in_loss"] / row["sampled"]) + " of what it sampled" if row["sampled"] else "nothing sampled"
    return f"0% (run failed; {kept})"


def without_host(attempt: str) -> str:
    """An attempt to reach past the machine, as the published table says it: the request's method, scheme and port,
    never the host it named (the pages name no network host).

    >>> without_host("CONNECT registry.example:443 HTTP/1.1")
    'CONNECT to another host, port 443'
    >>> without_host("GET http://updates.example/v1/check HTTP/1.1")
    'GET http to another host'
    """
    parts = attempt.split(" ")
    if len(parts) < 2 or not parts[0].isupper():
        return attempt
    method, target = parts[0], parts[1]
    if method == "CONNECT":
        port = target.rpartition(":")[2]
        return f"CONNECT to another host, port {port}" if port.isdigit() else "CONNECT to another host"
    scheme = target.split("://", 1)[0] if "://" in target else "http"
    return f"{method} {scheme} to another host"
