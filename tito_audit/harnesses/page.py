"""``reports/harnesses.html``: the harness matrix as one self-contained page (the project's stylesheet, no script, no
network), grouped by harness, a row per model × parser × configuration."""

from __future__ import annotations

from typing import Any

from tito_audit.formatters.site.html import document, esc
from tito_audit.harnesses.rows import shown_share


def _share_cell(row: dict[str, Any]) -> str:
    share = row["trainable"]
    tone = "ok" if share >= 1 else "warn" if share >= 0.9 else "bad"
    text = shown_share(row)
    figures = f'<span class="small">{row["in_loss"]}/{row["sampled"]}</span>'
    return f'<td class="num {tone}"><strong>{esc(text)}</strong><br>{figures}</td>'


def _list(counts: dict[str, int]) -> str:
    if not counts:
        return "—"
    return "<br>".join(f'{esc(key)} <span class="muted">{value}</span>' for key, value in counts.items())


def _fix(row: dict[str, Any]) -> str:
    if row["trainable"] >= 1 or row["configuration"] != "default":
        return "—"
    fix = row.get("fix")
    if fix is None:
        return "none of its configurations does better"
    share = f"{fix['trainable'] * 100:.1f}%".replace(".0%", "%")
    why = f'<br><span class="small muted">{esc(fix["why"])}</span>' if fix.get("why") else ""
    return f"{esc(fix['configuration'])}: <strong>{esc(share)}</strong> ({fix['in_loss']}/{fix['sampled']}){why}"


def _why(row: dict[str, Any]) -> str:
    notes = [f"reached for {attempt}: the run fails" for attempt in row["network"]]
    if row["failure"]:
        notes.append(row["failure"])
    return "<br>".join(esc(n) for n in notes) or "—"


def _row(row: dict[str, Any]) -> str:
    seconds = f"{row['seconds']:.0f} s" if row.get("seconds") is not None else "—"
    cells = [
        esc(row["model"]),
        esc(row["parser"]),
        esc(row["configuration"]),
        f"{row['finished']}/{row['rollouts']}",
        str(row["turns"]),
        str(row["sessions"]),
        str(row["branches"]),
    ]
    return (
        "<tr>"
        + "".join(f"<td>{c}</td>" for c in cells)
        + _share_cell(row)
        + f"<td>{_list(row['made_by'])}</td><td>{_list(row['history'])}</td><td>{_list(row['causes'])}</td>"
        + f'<td>{_list(row["lost"])}</td><td>{_fix(row)}</td><td>{_why(row)}</td><td class="num">{seconds}</td>'
        + "</tr>"
    )


HEAD = (
    "<tr><th>model</th><th>parser</th><th>configuration</th><th>rollouts finished</th><th>turns</th><th>sessions</th>"
    "<th>branches</th><th>trainable (in loss / sampled)</th><th>branches made by</th>"
    "<th>what the harness did to its history</th><th>breaks made by (template, parser, BPE)</th>"
    "<th>lost, by cause</th><th>what brings it back</th><th>why a rollout failed</th><th>time</th></tr>"
)


def html_page(table: dict[str, Any]) -> str:
    rows = table["rows"]
    order: list[str] = []
    for row in rows:
        if row["harness"] not in order:
            order.append(row["harness"])
    sections = []
    for name in order:
        mine = [r for r in rows if r["harness"] == name]
        first = mine[0]
        streamed = "streamed" if first["streamed"] else "not streamed"
        sections.append(
            f'<section class="card"><h2>{esc(name)} <span class="muted small">{esc(first["package"])} '
            f"{esc(first['version'])} · {esc(first['dialect'])}, {streamed}</span></h2>"
            f'<div class="scroll"><table class="matrix">{HEAD}{"".join(_row(r) for r in mine)}</table></div></section>'
        )
    isolation = (
        "each lane of groups in a network namespace of its own (loopback only)"
        if table["isolated"]
        else "on the machine's network (no namespaces here), with the proxy trap"
    )
    facts = (
        f"{len(order)} harnesses · {len({r['model'] for r in rows})} models · {table['rollouts']} rollouts per row · "
        f"seed {table['seed']} · {isolation} · {table['seconds']:.0f} s of rollouts in all"
    )
    lede = (
        "Can a trainer train on rollouts of this harness with this model behind this engine? Each harness runs as it "
        "ships, pointed at tito-audit serve MODEL --engine standin with default options, on a small task; the "
        "figures are the gateway's own record of every session the harness opened: the ids the engine sampled, "
        "those in the loss of a training sample, and who made each branch and break."
    )
    body = (
        f'<header class="top"><div class="wrap"><h1>The harness matrix</h1><p class="lede">{esc(lede)}</p>'
        f'<p class="facts-line">{esc(facts)}</p><p class="facts-line"><a href="index.html">the template matrix</a>'
        ' · <a href="harnesses.json">harnesses.json</a> · <a href="harnesses.md">harnesses.md</a></p></div></header>'
        f'<main class="wrap">{"".join(sections)}</main>'
        '<footer><div class="wrap">produced by <code>tito-audit harnesses</code> (<code>make harnesses</code>)</div>'
        "</footer>"
    )
    return document("The harness matrix", body)
