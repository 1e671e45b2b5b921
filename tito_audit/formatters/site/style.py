"""The pages' one stylesheet, inline in every page (no network): light and dark through ``prefers-color-scheme``."""

from __future__ import annotations

CSS = """
:root {
  color-scheme: light dark;
  --bg: #f5f6f8; --surface: #ffffff; --sunken: #eef1f4; --text: #1c2128; --muted: #5d6875; --faint: #8a949e;
  --border: #dde2e8; --hairline: #eceff3; --accent: #2563c9; --focus: #2563c9;
  --ready: #17753a; --ready-bg: #dcf3e3; --rto: #875400; --rto-bg: #fbeec2;
  --broken: #bf1f2b; --broken-bg: #fde2e0; --unsupported: #6642c2; --unsupported-bg: #ece5fb;
  --na: #5d6875; --na-bg: #e8ebef;
  --code-bg: #f7f8fa; --j-d: #8250df; --j-k: #c2253a; --j-s: #0a4fa3; --j-n: #0b6e75; --j-f: #8a4b00;
  --j-x: #24292f; --j-t: #57606a; --j-c: #8a949e;
  --add-bg: #e7f8ec; --del-bg: #fdecea; --add-mark: #a8e9b9; --del-mark: #f8c3bf; --hunk-bg: #edf3fd;
  --special-bg: #e6eafb; --special: #3340a8; --first: #d92d20; --first-bg: #ffe1dc; --mark-bg: #ffe9a8;
  --shadow: 0 1px 2px rgba(20, 30, 45, .06), 0 1px 8px rgba(20, 30, 45, .04);
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0f1318; --surface: #161b22; --sunken: #1c222b; --text: #e4e9ef; --muted: #9aa5b1; --faint: #6e7884;
    --border: #2c343e; --hairline: #20262e; --accent: #6ea8ff; --focus: #6ea8ff;
    --ready: #56d37c; --ready-bg: #163823; --rto: #e7b548; --rto-bg: #3a2d0c;
    --broken: #ff7b72; --broken-bg: #45191a; --unsupported: #b99bff; --unsupported-bg: #2d2350;
    --na: #9aa5b1; --na-bg: #262d36;
    --code-bg: #12171d; --j-d: #c6a4ff; --j-k: #ff8a8a; --j-s: #8cc3ff; --j-n: #6fd6dc; --j-f: #f0b46e;
    --j-x: #dbe2ea; --j-t: #97a3af; --j-c: #6e7884;
    --add-bg: #13301d; --del-bg: #3a1618; --add-mark: #1f6b37; --del-mark: #7c2a2a; --hunk-bg: #17263b;
    --special-bg: #252d52; --special: #b5c0ff; --first: #ff8b7e; --first-bg: #5a1f1a; --mark-bg: #5b4a12;
    --shadow: none;
  }
}
* { box-sizing: border-box; }
html { background: var(--bg); }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", sans-serif;
  color: var(--text); background: var(--bg); }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
:focus-visible { outline: 2px solid var(--focus); outline-offset: 2px; border-radius: 4px; }
code, .code, .tok, kbd { font-family: ui-monospace, "SF Mono", "Cascadia Mono", Menlo, Consolas, monospace; }
code { font-size: .88em; background: var(--sunken); padding: .05em .3em; border-radius: 4px; }
h1 { font-size: 1.65rem; line-height: 1.25; margin: 0 0 .35rem; letter-spacing: -.01em; }
h2 { font-size: 1.15rem; margin: 0 0 .6rem; }
h3 { font-size: 1rem; margin: 1rem 0 .4rem; }
p { margin: .4rem 0; }
.wrap { max-width: 1360px; margin: 0 auto; padding: 0 24px; }
.muted { color: var(--muted); }
.small { font-size: .85rem; }
header.top { background: var(--surface); border-bottom: 1px solid var(--border); padding: 20px 0 18px;
  margin-bottom: 20px; }
header.top .crumb { font-size: .85rem; margin-bottom: .35rem; }
header.top .lede { color: var(--muted); max-width: 90ch; margin: 0; }
header.top .facts-line { color: var(--faint); font-size: .85rem; margin: .3rem 0 0; }
main { padding-bottom: 40px; }
section { margin: 0 0 22px; }
.card { background: var(--surface); border: 1px solid var(--border); border-radius: 10px; padding: 16px 18px;
  box-shadow: var(--shadow); }
footer { color: var(--muted); font-size: .82rem; border-top: 1px solid var(--border); padding: 14px 0 30px; }
button { font: inherit; color: inherit; }
.btn { background: var(--surface); border: 1px solid var(--border); border-radius: 7px; padding: 5px 11px;
  cursor: pointer; }
.btn:hover { background: var(--sunken); }

/* verdict and cause chips */
.v { display: inline-block; font-weight: 650; font-size: .8rem; line-height: 1.2; padding: .22em .6em;
  border-radius: 99px; white-space: nowrap; text-decoration: none; }
a.v:hover { text-decoration: none; filter: brightness(.97); }
.v-ready { color: var(--ready); background: var(--ready-bg); }
.v-ready-tool-only { color: var(--rto); background: var(--rto-bg); }
.v-broken { color: var(--broken); background: var(--broken-bg); }
.v-unsupported { color: var(--unsupported); background: var(--unsupported-bg); }
.v-na { color: var(--na); background: var(--na-bg); }
.v.big { font-size: 1.05rem; padding: .3em .85em; }
.cause { display: inline-block; font: 500 .76rem/1.3 ui-monospace, Menlo, Consolas, monospace; padding: .12em .45em;
  border: 1px solid var(--border); border-radius: 5px; color: var(--text); background: var(--sunken);
  white-space: nowrap; margin: 1px 2px 1px 0; }
a.cause:hover { border-color: var(--accent); text-decoration: none; }
.swatch { display: inline-block; width: .8em; height: .8em; border-radius: 3px; vertical-align: -.05em; }
.swatch.v-ready, .seg.v-ready, .dot.v-ready { background: var(--ready); }
.swatch.v-ready-tool-only, .seg.v-ready-tool-only, .dot.v-ready-tool-only { background: var(--rto); }
.swatch.v-broken, .seg.v-broken, .dot.v-broken { background: var(--broken); }
.swatch.v-unsupported, .seg.v-unsupported, .dot.v-unsupported { background: var(--unsupported); }
.swatch.v-na, .seg.v-na, .dot.v-na { background: var(--faint); }

/* front page: summary */
.summary { display: grid; grid-template-columns: minmax(300px, 5fr) 8fr; gap: 18px; }
.bar { display: flex; height: 30px; border-radius: 7px; overflow: hidden; margin: 6px 0 14px; gap: 2px; }
.seg { color: #fff; font-weight: 700; font-size: .85rem; display: flex; align-items: center; justify-content: center;
  min-width: 26px; }
@media (prefers-color-scheme: dark) { .seg { color: #0f1318; } }
.legend { list-style: none; margin: 0; padding: 0; display: grid; gap: 4px; }
.legend button { display: grid; grid-template-columns: 1.1em 9.5em 2.5em 1fr; align-items: baseline; gap: 6px;
  width: 100%; text-align: left; background: none; border: 1px solid transparent; border-radius: 7px;
  padding: 3px 6px;
  cursor: pointer; }
.legend button:hover, .legend button[aria-pressed="true"] { background: var(--sunken); border-color: var(--border); }
.legend .count { font-weight: 700; text-align: right; font-variant-numeric: tabular-nums; }
.legend .what { color: var(--muted); font-size: .82rem; }
.note-line { color: var(--muted); font-size: .85rem; margin-top: 10px; }
.families ul { list-style: none; margin: 0; padding: 0; display: grid;
  grid-template-columns: repeat(auto-fill, minmax(158px, 1fr)); gap: 4px 8px; }
.families button { width: 100%; display: flex; justify-content: space-between; align-items: center; gap: 6px;
  background: none; border: 1px solid transparent; border-radius: 6px; padding: 2px 6px; cursor: pointer;
  text-align: left; }
.families button:hover, .families button[aria-pressed="true"] { background: var(--sunken);
  border-color: var(--border); }
.families .name { font-size: .85rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.dots { display: inline-flex; gap: 3px; flex: none; }
.dot { width: 9px; height: 9px; border-radius: 50%; display: inline-block; }
.dot.hollow { background: none; border: 1.5px solid var(--faint); }

/* front page: controls and table */
.controls { display: flex; flex-wrap: wrap; gap: 10px 16px; align-items: center; margin: 0 0 10px; }
.controls label { font-size: .85rem; color: var(--muted); display: flex; gap: 6px; align-items: center; }
.controls input, .controls select { font: inherit; font-size: .9rem; color: var(--text); background: var(--surface);
  border: 1px solid var(--border); border-radius: 7px; padding: 5px 9px; }
.controls input { width: 18em; }
.controls output { margin-left: auto; color: var(--muted); font-size: .85rem; }
table.matrix { width: 100%; table-layout: fixed; border-collapse: separate; border-spacing: 0;
  background: var(--surface);
  border: 1px solid var(--border); border-radius: 10px; overflow: hidden; font-size: .88rem;
  box-shadow: var(--shadow); }
table.matrix th, table.matrix td { padding: 7px 10px; text-align: left; vertical-align: top;
  border-bottom: 1px solid var(--border);
  overflow: hidden; }
table.matrix thead th { position: sticky; top: 0; background: var(--sunken); font-size: .78rem;
  text-transform: uppercase;
  letter-spacing: .03em; color: var(--muted); z-index: 1; }
table.matrix td { border-bottom: 0; border-top: 1px solid var(--hairline); }
table.matrix tr.lead td { border-top: 1px solid var(--border); }
table.matrix td.fam { color: var(--muted); font-size: .82rem; font-weight: 600; }
table.matrix tr.model:not(.lead) td.fam > span { visibility: hidden; }
table.matrix tbody tr.model:hover td { background: var(--sunken); }
table.matrix td.model .name, table.matrix td.model .org { display: block; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
table.matrix td.model .name { font-weight: 600; }
table.matrix td.model .org { color: var(--muted); font-size: .8rem; }
table.matrix td.model .alias { display: block; font-size: .78rem; color: var(--muted); white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis; }
.steps { display: flex; gap: 4px; }
.step { display: inline-flex; width: 30px; height: 1.6em; border-radius: 5px; align-items: center;
  justify-content: center; font-size: .78rem; font-weight: 700; }
.steps.head span { width: 30px; text-align: center; font-size: .7rem; letter-spacing: 0; text-transform: none; }
.step.stable { color: var(--ready); background: var(--ready-bg); }
.step.unstable { color: var(--broken); background: var(--broken-bg); }
.step.refused { color: var(--unsupported); background: var(--unsupported-bg); }
.step.na { color: var(--faint); background: var(--sunken); }
.clip { display: block; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
details.more > summary { list-style: none; cursor: pointer; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
details.more > summary::-webkit-details-marker { display: none; }
details.more > summary::before { content: "▸ "; color: var(--faint); }
details.more[open] > summary::before { content: "▾ "; }
details.more[open] > summary { white-space: normal; }
details.more .full { color: var(--muted); font-size: .84rem; margin-top: 4px; white-space: normal;
  overflow-wrap: anywhere; }
details.section { margin: 14px 0; }
details.section > summary { cursor: pointer; font-weight: 600; padding: 8px 0; }
#unreachable > summary { color: var(--muted); }
details.section > summary .muted { font-weight: 400; }
.level { font-size: .8rem; color: var(--muted); }
.warn { color: var(--rto); font-weight: 700; }
.glossary { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 8px 22px; margin: 0; }
.glossary .term { display: grid; grid-template-columns: 12.5em 1fr; gap: 10px; align-items: baseline; padding: 4px 0;
  border-bottom: 1px dashed var(--border); }
.glossary dd { margin: 0; color: var(--muted); font-size: .88rem; }
.glossary .term:target { background: var(--mark-bg); border-radius: 6px; }

/* model page */
.verdict-card { display: grid; grid-template-columns: auto 1fr; gap: 6px 18px; align-items: center; }
.verdict-card .reason { font-size: 1.02rem; }
.variants { display: flex; flex-wrap: wrap; gap: 6px 8px; margin-top: 10px; grid-column: 1 / -1; }
.variant-chip { display: inline-flex; align-items: center; gap: 6px; border: 1px solid var(--border);
  border-radius: 99px;
  padding: 2px 4px 2px 10px; font-size: .84rem; background: var(--surface); }
.variant-chip code { background: none; padding: 0; }
.wayout { grid-column: 1 / -1; margin-top: 10px; padding: 10px 12px; border-radius: 8px; background: var(--sunken);
  border-left: 4px solid var(--accent); }
.wayout strong { margin-right: 6px; }
.card.ok { border-left: 4px solid var(--ready); }
.meta { display: flex; flex-wrap: wrap; gap: 4px 18px; font-size: .85rem; color: var(--muted); margin-top: 6px; }
.meta b { color: var(--text); font-weight: 600; }
.example { margin: 0 0 18px; }
.example-head { display: flex; flex-wrap: wrap; gap: 6px 12px; align-items: baseline;
  justify-content: space-between; }
.example-head .where { font-size: .84rem; color: var(--muted); }
.example .changed { margin: 6px 0 10px; }
.tokdiff { overflow-x: auto; margin: 8px 0; padding-bottom: 4px; }
.tokdiff table { border-collapse: separate; border-spacing: 3px 4px; }
.tokdiff caption { text-align: left; font-size: .8rem; color: var(--muted); padding: 0 3px 2px; }
.tokdiff th { font-size: .72rem; font-weight: 500; color: var(--faint); text-align: center; white-space: nowrap;
  font-variant-numeric: tabular-nums; }
.tokdiff th[scope="row"] { text-align: right; padding-right: 8px; color: var(--muted); font-size: .8rem;
  font-weight: 600;
  max-width: 13em; white-space: normal; line-height: 1.2; }
.tokdiff th.first { color: var(--first); font-weight: 700; }
.tokdiff td { padding: 0; text-align: center; }
.tok { display: inline-block; min-width: 1.8em; padding: 3px 6px; border-radius: 5px; font-size: .82rem;
  white-space: pre;
  background: var(--sunken); border: 1px solid var(--border); }
.tok.special { background: var(--special-bg); color: var(--special); border-color: transparent; font-weight: 600; }
td.first .tok { background: var(--first-bg); border: 2px solid var(--first); color: var(--text); font-weight: 700; }
td.after .tok { opacity: .55; }
td.none { color: var(--faint); }
.textdiff { font-size: .8rem; background: var(--code-bg); border: 1px solid var(--border); border-radius: 7px;
  padding: 6px 10px; overflow-x: auto; }
.textrow { display: grid; grid-template-columns: 13em 1fr; gap: 8px; white-space: pre; }
.textrow .side { color: var(--muted); font-size: .78rem; white-space: normal; }
.textrow code { background: none; padding: 0; }
.textrow mark.first { background: var(--first-bg); color: inherit; border-radius: 3px; }
.lines { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; margin-top: 8px; }
.lines > div { min-width: 0; }
.ws { font-style: normal; color: var(--faint); font-size: 1.05em; }
.lines h4 { margin: 0 0 4px; font-size: .82rem; color: var(--muted); font-weight: 600; }
.lines h4 code { font-size: .95em; }
.code { background: var(--code-bg); border: 1px solid var(--border); border-radius: 7px; overflow-x: auto;
  font-size: .8rem; }
.code table { border-collapse: collapse; width: 100%; }
.code td { padding: 1px 8px; white-space: pre; vertical-align: top; color: var(--j-t); }
.code td.ln { color: var(--faint); text-align: right; width: 1%; user-select: none;
  border-right: 1px solid var(--border); }
.code tr.accent td { background: var(--mark-bg); }
.code mark { background: var(--mark-bg); color: inherit; border-radius: 2px; }
.jd { color: var(--j-d); } .jk { color: var(--j-k); font-weight: 600; } .js { color: var(--j-s);
  } .jn { color: var(--j-n); }
.jf { color: var(--j-f); } .jx { color: var(--j-x); } .jc { color: var(--j-c); font-style: italic; }
.diff tr.add td { background: var(--add-bg); } .diff tr.del td { background: var(--del-bg); }
.diff tr.add mark { background: var(--add-mark); } .diff tr.del mark { background: var(--del-mark); }
.diff tr.hunk td { background: var(--hunk-bg); color: var(--muted); }
.diff tr.file td { color: var(--muted); font-weight: 600; }
.diff .sign { display: inline-block; width: 1.2em; color: var(--faint); user-select: none; }
.reads { font-size: .78rem; color: var(--muted); margin-top: 3px; }
.confirm { list-style: none; padding: 0; margin: 8px 0 0; font-size: .86rem; }
.confirm li { margin: 2px 0; }
.confirm .yes { color: var(--ready); font-weight: 700; } .confirm .no { color: var(--faint); font-weight: 700; }
table.plain { border-collapse: collapse; font-size: .86rem; margin: 6px 0; }
table.plain th, table.plain td { border-bottom: 1px solid var(--border); padding: 4px 10px; text-align: left;
  vertical-align: top; }
table.plain th { color: var(--muted); font-weight: 600; font-size: .8rem; }
table.plain td.num, table.plain th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.plain td.bad { color: var(--broken); font-weight: 700; }
.table-wrap { overflow-x: auto; }
ul.facts { margin: 6px 0; padding-left: 1.2em; font-size: .88rem; }
ul.facts li { margin: 2px 0; overflow-wrap: anywhere; }
@media (max-width: 900px) {
  .summary, .lines { grid-template-columns: 1fr; }
  .textrow { grid-template-columns: 1fr; }
}
"""
