"""The training form a person can read: ``{% generation %}`` … ``{% endgeneration %}`` placed in the template's own
assistant branches, around the statements (or the parts of one output) that write what the model samples.

The computed form (:mod:`tito_audit.repair.training_wrap`) is the definition of what a turn's mask holds: from where
the turn stops sharing the generation prompt's text through its first stop token. A placed form is offered instead
when one place of each assistant branch is where that mask begins in every turn, and one where it ends, under every
variant; they are found from the renders themselves, never from the template's expressions:

1. every place a tag can go in the branch (:mod:`tito_audit.repair.training_points`) gets a marker of its own, and the
   computed form's generation tags get markers too;
2. both are rendered on every render the training form is checked on (:mod:`tito_audit.repair.training_renders`):
   each run of the branch (ended by the marker before its closing tag) is matched with the computed form's block of
   the same turn, and a place survives as the block's opening when its marker lands in the token where that block
   begins in every run (as its closing: in the token where it ends), the tokens being the audit's tokenizer's: the
   mask transformers makes from a block is the tokens holding its first through its last character;
3. the surviving pair in one block of the branch is written (on the computed form's very characters where it can
   be, then the one that splits the fewest outputs, then the first), the
   template's own generation tags are removed and the constants left are folded
   (:func:`~tito_audit.repair.fixes.fold.fold`);
4. the placed form's assistant mask must equal the computed form's, token for token, in every compared render;
   :mod:`tito_audit.repair.training_form` then verifies it as it verifies any training form (byte-identical
   renders, its own audit and mask check).

When no pair survives, the reason names the branch and what moved (the settings, or the turns), and the computed
form is used.

Example: a branch that writes its turn in one output, ``{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}``,
is placed as ``{{- '<|im_start|>assistant\\n' }}``, ``{%- generation -%}``, ``{{- content + '<|im_end|>' }}``,
``{%- endgeneration -%}``, ``{{- '\\n' }}`` (a line each, at the output's indentation).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from jinja2 import TemplateError

from tito_audit.audit.audit_options import AuditOptions
from tito_audit.audit.results import AuditReport
from tito_audit.model.load_folder import LoadedModel
from tito_audit.model.template_errors import error_line
from tito_audit.repair.fixes.source import Edit, TemplateSource
from tito_audit.repair.training_points import GENERATION_WORDS, Point, points_of, writes
from tito_audit.repair.training_renders import each_mask, each_render
from tito_audit.repair.training_wrap import assistant_branches, folded, neutral, tags_of

_MARK = re.compile("\x02([0-9]+|S|E)\x03")
BEGINS, ENDS = "begins", "ends"
NEVER_RAN = "never ran in the compared renders"
TAIL = 32
"""Characters of rendered text a reason quotes before a place."""


@dataclass
class Placement:
    """The placed form, or why none."""

    source: str | None = None
    why_not: str = ""
    outside: bool = False
    """Whether assistant messages are written outside the template's assistant-only branches (the reason)."""


def marked(source: str) -> str:
    """``source`` with each generation tag writing a marker (``\\x02S\\x03``, ``\\x02E\\x03``) instead, under the
    same whitespace control: where the marker lands in the render is where transformers records the block."""
    template = TemplateSource.parse(source)
    edits = []
    for tag in tags_of(template):
        if tag.keyword in GENERATION_WORDS:
            mark = "\x02S\x03" if tag.keyword == "generation" else "\x02E\x03"
            edits.append(Edit(tag.start, tag.end, f"{tag.opening} if true %}}{mark}{{% endif {tag.closing}", "mark"))
    return template.apply(edits)


def _read(text: str) -> tuple[str, list[tuple[str, int]]]:
    """The text without markers, and each marker with where it lands in that text."""
    pieces: list[str] = []
    events: list[tuple[str, int]] = []
    length, last = 0, 0
    for match in _MARK.finditer(text):
        piece = text[last : match.start()]
        pieces.append(piece)
        length += len(piece)
        events.append((match.group(1), length))
        last = match.end()
    pieces.append(text[last:])
    return "".join(pieces), events


def _blocks(events: list[tuple[str, int]]) -> list[tuple[int, int]]:
    starts = [at for name, at in events if name == "S"]
    ends = [at for name, at in events if name == "E"]
    return list(zip(starts, ends, strict=False))


@dataclass
class _Evidence:
    """What the renders showed: for each variant and branch, the places where every run's block began (ended)."""

    points: list[Point]
    runs: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    survivors: dict[tuple[str, int, str], set[int]] = field(default_factory=dict)
    exact: dict[tuple[str, int, str], set[int]] = field(default_factory=dict)
    """The survivors whose marker lands on the very character where the block begins (ends) in every run."""
    first_tail: dict[tuple[str, int, str], str] = field(default_factory=dict)
    last_tail: dict[tuple[str, int, str], str] = field(default_factory=dict)
    failure: str = ""
    outside: bool = False

    def run(
        self,
        variant: str,
        branch: int,
        hits: dict[int, list[int]],
        block: tuple[int, int],
        text: str,
        token: Callable[[int], int | None],
    ) -> None:
        """One run of ``branch``: the places that land on the token where its block begins (ends)."""
        self.runs[variant][branch] += 1
        for word, at, shift in ((BEGINS, block[0], 0), (ENDS, block[1], 1)):
            key = (variant, branch, word)
            wanted = token(at - shift)
            ok = {
                index
                for index, where in hits.items()
                if len(where) == 1 and token(where[0] - shift) == wanted and self.points[index].branch == branch
            }
            before = self.survivors.get(key)
            self.survivors[key] = ok if before is None else before & ok
            exact = {index for index in ok if hits[index] == [at]}
            self.exact[key] = exact if before is None else self.exact[key] & exact
            self.first_tail.setdefault(key, _tail(text, at))
            if (before or before is None) and not self.survivors[key]:
                self.last_tail[key] = _tail(text, at)


def _tail(text: str, at: int) -> str:
    shown = text[max(0, at - TAIL) : at]
    return ("…" if at > TAIL else "") + shown.replace("`", "'").replace("\n", "\\n")


def _tokens(loaded: LoadedModel, text: str) -> Callable[[int], int | None]:
    """The index of the token holding each character of ``text`` (None outside it), as transformers reads a block's
    first and last character; each character its own place when the tokenizer gives no offsets."""
    encoding = loaded.tokenizer(text, add_special_tokens=False)
    if not getattr(encoding, "encodings", None):
        return lambda at: at if 0 <= at < len(text) else None
    first = encoding.encodings[0]
    return lambda at: first.char_to_token(at) if 0 <= at < len(text) else None


def _gather(
    loaded: LoadedModel,
    probe: str,
    computed: str,
    points: list[Point],
    lines: list[int],
    report: AuditReport,
    options: AuditOptions,
) -> _Evidence:
    evidence = _Evidence(points)
    for render in each_render(loaded, [probe, marked(computed)], report, options):
        probed, reference = render.texts
        if probed is None and reference is None:
            continue
        if probed is None or reference is None:
            evidence.failure = f"a marked place changed whether the template renders ({render.where})"
            return evidence
        text, events = _read(probed)
        plain, marks = _read(reference)
        if text != plain:
            evidence.failure = f"a marked place changed the render ({render.where})"
            return evidence
        blocks = _blocks(marks)
        token = _tokens(loaded, text)
        hits: dict[int, list[int]] = defaultdict(list)
        turn = 0
        for name, at in events:
            index = int(name)
            hits[index].append(at)
            if points[index].leave:
                if turn >= len(blocks):
                    break
                evidence.run(render.variant, points[index].branch, hits, blocks[turn], text, token)
                turn += 1
                hits = defaultdict(list)
        if turn < render.assistants and turn == len(blocks):
            evidence.failure = (
                f"not every assistant message runs an assistant-only branch of the template (line "
                f"{', '.join(map(str, lines))}): the others are written in a branch shared with other roles, or not "
                f"at all ({render.where})"
            )
            evidence.outside = True
            return evidence
        if turn != len(blocks):
            evidence.failure = (
                f"the assistant branches ran {turn} times where the computed form marks {len(blocks)} turns "
                f"({render.where})"
            )
            return evidence
    return evidence


def place(loaded: LoadedModel, serving: str, computed: str, report: AuditReport, options: AuditOptions) -> Placement:
    """The placed form of ``serving`` whose blocks fall where ``computed``'s do (the computed form made from its
    assistant branches, already known to render as ``serving`` does), or why there is none."""
    if "\x02" in serving:
        return Placement(why_not="the template holds the character the places are marked with")
    template = TemplateSource.parse(serving)
    tags = tags_of(template)
    branches = [b for b in assistant_branches(tags) if writes(template, tags[b[0]].end, tags[b[1]].start)]
    if not branches:
        why = "the template writes assistant messages in branches it shares with other roles"
        return Placement(why_not=why, outside=True)
    lines = [template.line_of(tags[opened].start) for opened, _, _ in branches]
    points = points_of(template, [(tags[opened].end, tags[closed].start) for opened, closed, _ in branches])
    probe = template.apply(Edit(p.start, p.end, p.marker(f"\x02{index}\x03"), "mark") for index, p in enumerate(points))
    evidence = _gather(loaded, probe, computed, points, lines, report, options)
    if evidence.failure:
        return Placement(why_not=evidence.failure, outside=evidence.outside)
    found = [_pair(evidence, branch, line, [v.name for v in report.variants]) for branch, line in enumerate(lines)]
    chosen = [pair for pair, _ in found if pair is not None]
    if len(chosen) < len(found):  # a branch that ran says more than one that never did
        whys = [why for pair, why in found if pair is None]
        return Placement(why_not=next((why for why in whys if NEVER_RAN not in why), whys[0]))
    edits = [neutral(tag) for tag in tags if tag.keyword in GENERATION_WORDS]
    for opening, closing in chosen:
        edits.append(Edit(opening.start, opening.end, opening.text("generation"), "training"))
        edits.append(Edit(closing.start, closing.end, closing.text("endgeneration"), "training"))
    placed = folded(template.apply(sorted(edits, key=lambda edit: (edit.start, edit.end))), serving)
    try:
        difference = _same_masks(loaded, computed, placed, report, options)
    except TemplateError as exc:
        return Placement(why_not=f"the placed form does not compile: {error_line(exc)}")
    if difference:
        return Placement(why_not=f"the placed form's mask differs from the computed form's ({difference})")
    return Placement(source=placed)


def _pair(evidence: _Evidence, branch: int, line: int, variants: list[str]) -> tuple[tuple[Point, Point] | None, str]:
    """The best pair of places for ``branch`` (opening and closing in one block; on the very characters where the
    computed form's block begins and ends when they can be, then splitting the fewest outputs, then the first), or
    why none survives."""
    ran = [v for v in variants if evidence.runs[v][branch]]
    if not ran:
        return None, f"the assistant branch at line {line} {NEVER_RAN}"
    found: dict[str, set[int]] = {}
    exact: dict[str, set[int]] = {}
    for word in (BEGINS, ENDS):
        kept = set.intersection(*(evidence.survivors[(v, branch, word)] for v in ran))
        if not kept:
            return None, _why_not(evidence, branch, line, word, ran)
        found[word] = kept
        exact[word] = set.intersection(*(evidence.exact[(v, branch, word)] for v in ran))
    points = evidence.points
    pairs = [
        ((i not in exact[BEGINS]) + (j not in exact[ENDS]), points[i].rank + points[j].rank, i, j)
        for i in found[BEGINS]
        for j in found[ENDS]
        if i < j and points[i].scope == points[j].scope
    ]
    if not pairs:
        return None, f"the sampled text begins and ends in different blocks of the assistant branch at line {line}"
    *_, i, j = min(pairs)
    return (points[i], points[j]), ""


def _why_not(evidence: _Evidence, branch: int, line: int, word: str, ran: list[str]) -> str:
    alone = [v for v in ran if evidence.survivors[(v, branch, word)]]
    if len(alone) == len(ran):
        by_tail: dict[str, list[str]] = defaultdict(list)
        for variant in ran:
            by_tail[evidence.first_tail[(variant, branch, word)]].append(variant)
        shown = "; ".join(f"{', '.join(names)}: after `{tail}`" for tail, names in by_tail.items())
        return f"where the sampled text {word} in the assistant branch at line {line} depends on the settings ({shown})"
    variant = next(v for v in ran if not evidence.survivors[(v, branch, word)])
    tail = evidence.last_tail.get((variant, branch, word), "")
    return (
        f"no one place in the assistant branch at line {line} is where the sampled text {word} in every turn (in a "
        f"turn under {variant} it {word} after `{tail}`)"
    )


def _same_masks(loaded: LoadedModel, computed: str, placed: str, report: AuditReport, options: AuditOptions) -> str:
    """The first render without a generation prompt whose tokens or assistant mask differ between the computed and
    the placed form, or ``""``."""
    for where, (first, second) in each_mask(loaded, [computed, placed], report, options):
        if first is None or second is None:
            if first is not second:
                return where
        elif (first.ids, first.mask) != (second.ids, second.mask):
            return where
    return ""
