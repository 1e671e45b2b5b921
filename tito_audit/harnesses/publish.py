"""``reports/harnesses.json``, ``.md`` and ``.html``: the harness matrix as published.

Each file is written only when its bytes change (a rerun whose cells all come from the store rewrites nothing). The
JSON holds every row as :mod:`.rows` sums it; the Markdown and the HTML give, per harness × model × parser, the
trainable share and its figures, what lost the rest (by cause and by who made it), what the harness did to its
history, and for a row below 100% the configuration that brings it back, with that configuration's figure; each row
says how long its rollouts took when they ran.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tito_audit.harnesses.page import html_page
from tito_audit.harnesses.rows import percent, shown_share, trainable_share
from tito_audit.outputs import write_atomically

NAMES = ("harnesses.json", "harnesses.md", "harnesses.html")


def with_fixes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the table (default and compaction configurations), each below 100% given ``fix``: the fix
    configuration of the same harness, model and parser with the best share, its name and figures (None: none
    runs, or none does better)."""
    shown = []
    for row in rows:
        if row["configuration"] in _fix_names(rows) and row["configuration"] != "default":
            continue
        entry = dict(row)
        entry["trainable"] = trainable_share(row)
        if entry["trainable"] < 1 and row["configuration"] == "default":
            candidates = [
                r
                for r in rows
                if (r["name"], r["model"], r["parser"]) == (row["name"], row["model"], row["parser"])
                and r["configuration"] in _fix_names(rows)
                and trainable_share(r) > entry["trainable"]
            ]
            best = max(candidates, key=trainable_share, default=None)
            entry["fix"] = (
                None
                if best is None
                else {
                    "configuration": best["configuration"],
                    "trainable": trainable_share(best),
                    "sampled": best["sampled"],
                    "in_loss": best["in_loss"],
                    "why": best.get("fixes") or "",
                }
            )
        shown.append(entry)
    return shown


def _fix_names(rows: list[dict[str, Any]]) -> set[str]:
    return {r["configuration"] for r in rows if r.get("role") == "fix"}


def markdown(table: dict[str, Any]) -> str:
    rows = table["rows"]
    lines = [
        "# The harness matrix",
        "",
        "Which agent harness, model and engine parser a trainer can train on: real harnesses as they ship, pointed at "
        "`tito-audit serve MODEL --engine standin` with default options, each on a small task "
        f"({table['rollouts']} rollouts per row, seed {table['seed']}); figures from the gateway's own record "
        "(`GET /sessions/{id}`). See docs/harnesses.md.",
        "",
        "Sessions are those the gateway found the harness's requests in (by the id it sends, or by its conversation); "
        "each branch beyond a session's own names who made it (the harness, with what it did to its history), each "
        "break its maker (template, parser, BPE).",
        "",
        "| harness | version | dialect | model | parser | configuration | rollouts | turns | sampled | in loss | "
        "trainable | sessions | branches | branches made by | history | breaks made by | lost, by cause | fix | "
        "seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            "| "
            + " | ".join(
                [
                    row["harness"],
                    row["version"],
                    row["dialect"] + (", streamed" if row["streamed"] else ""),
                    row["model"],
                    row["parser"],
                    row["configuration"],
                    f"{row['finished']}/{row['rollouts']}",
                    str(row["turns"]),
                    str(row["sampled"]),
                    str(row["in_loss"]),
                    shown_share(row),
                    str(row["sessions"]),
                    str(row["branches"]),
                    _pairs(row["made_by"]) or "—",
                    _pairs(row["history"]) or "—",
                    _pairs(row["breaks"]) or "—",
                    _pairs(row["lost"]) or "—",
                    fix_text(row),
                    f"{row['seconds']:.0f}" if row.get("seconds") is not None else "—",
                ]
            ).replace("\n", " ")
            + " |"
        )
    failures = [r for r in rows if r["failure"] or r["network"]]
    if failures:
        lines += ["", "## Rollouts that did not finish", ""]
        for row in failures:
            why = "; ".join(
                [*(f"reached for {a}" for a in row["network"]), *([row["failure"]] if row["failure"] else [])]
            )
            lines.append(f"- {row['harness']} × {row['model']} × {row['parser']} ({row['configuration']}): {why}")
    return "\n".join(lines) + "\n"


def fix_text(row: dict[str, Any]) -> str:
    if row["trainable"] >= 1 or row["configuration"] != "default":
        return "—"
    fix = row.get("fix")
    if fix is None:
        return "none found"
    said = f"{fix['configuration']}: {percent(fix['trainable'])} ({fix['in_loss']}/{fix['sampled']})"
    return f"{said} ({fix['why']})" if fix.get("why") else said


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{key} {value}" for key, value in counts.items())


def write_if_changed(path: Path, text: str) -> bool:
    data = text.encode("utf-8")
    if path.exists() and path.read_bytes() == data:
        return False
    write_atomically(path, data)
    return True


def publish(table: dict[str, Any], folder: Path) -> list[Path]:
    """Write the three files into ``folder``; the ones whose bytes changed."""
    shown = {
        "rollouts": table["rollouts"],
        "seed": table["seed"],
        "isolated": table["isolated"],
        "seconds": round(sum(r["seconds"] or 0 for r in table["rows"]), 1),
        "rows": with_fixes(table["rows"]),
    }
    texts = {
        "harnesses.json": json.dumps(shown, ensure_ascii=False, indent=1) + "\n",
        "harnesses.md": markdown(shown),
        "harnesses.html": html_page(shown),
    }
    folder.mkdir(parents=True, exist_ok=True)
    return [folder / name for name, text in texts.items() if write_if_changed(folder / name, text)]
