"""The contract (docs/contract.md) and the code agree: every cause label, mask label, verdict, reasoning form, harness
shape and shape change the code can write is defined there, with the same words, and everything defined there is
something the code writes; the code names causes only through their definitions and cites the contract, nothing
outside the repository."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tito_audit.audit.checks.mask_compare import LABEL_LINES
from tito_audit.audit.conditions.step_conditions import (
    BACK_TO_BACK,
    RARE_FORM,
    REASONING_WORDS,
    SETTING,
    SHAPE_WORDS,
    TEXT_BEFORE_CALL,
)
from tito_audit.audit.conditions.undoings import UNDONE_AS, can_undo
from tito_audit.audit.core.causes import CAUSES
from tito_audit.audit.results import VERDICT_ORDER
from tito_audit.conversations.shapes import SHAPE_CHANGES

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"
PACKAGE = ROOT / "tito_audit"
CAUSES_PACKAGE = PACKAGE / "audit" / "core" / "causes"


def _section(title: str) -> str:
    """The text under the heading ``title`` (any level) up to the next heading."""
    text = CONTRACT.read_text(encoding="utf-8")
    match = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", text, re.S | re.M)
    assert match, f"docs/contract.md has no section {title!r}"
    return match.group(1)


def _definitions(title: str) -> dict[str, str]:
    """``- `term`: definition`` items of a section (a definition may run on over indented lines)."""
    items = re.findall(r"^- `([^`]+)`(?:: (.*?))?\s*(?=^- |^\S|\Z)", _section(title), re.S | re.M)
    return {term: " ".join(words.split()) for term, words in items}


def _table(title: str) -> dict[str, str]:
    """First and second column of a section's table, by its first column's code text."""
    rows = re.findall(r"^\| `([^`]+)` \| (.*?) \|$", _section(title), re.M)
    return dict(rows)


def test_every_cause_label_is_defined_with_its_own_words_and_nothing_else():
    defined = _definitions("Cause labels")
    assert list(defined) == list(CAUSES), "the contract's cause labels and the causes' table differ (or their order)"
    for name, cause in CAUSES.items():
        assert defined[name] == " ".join(cause.line.split()), f"{name}: the contract says otherwise than its LINE"


def test_every_mask_label_is_defined_and_none_is_a_cause():
    defined = _definitions("Mask labels")
    assert defined == {name: " ".join(line.split()) for name, line in LABEL_LINES.items()}
    assert not set(defined) & set(CAUSES)


def test_every_verdict_is_defined():
    assert list(_table("Verdicts")) == list(VERDICT_ORDER)


def test_every_reasoning_form_and_harness_shape_is_defined_with_its_words():
    assert _table("Reasoning forms") == REASONING_WORDS
    shapes = list(_definitions("Shapes harnesses send"))
    assert sorted(shapes) == sorted([*SHAPE_WORDS.values(), BACK_TO_BACK])


def test_every_condition_is_undone_as_the_contract_says():
    """Conditions are causes: each condition a step can be tagged with has the undoing the contract gives it (the one a
    failing step is walked again with), and the contract names no undoing the code does not make."""
    assert _definitions("Undoing a condition") == {term: " ".join(words.split()) for term, words in UNDONE_AS.items()}
    tagged = [*SHAPE_WORDS.values(), BACK_TO_BACK, *REASONING_WORDS.values(), TEXT_BEFORE_CALL]
    assert sorted(tagged) == sorted(set(UNDONE_AS) - {RARE_FORM, SETTING})
    kinds = {"when two assistant turns run back to back": "shape", TEXT_BEFORE_CALL: "form"}
    for words in tagged:
        kind = kinds.get(words, "form" if words in REASONING_WORDS.values() else "shape")
        assert can_undo(f"{kind}: {words}"), words
    assert can_undo("rare form: when the model calls with no analysis message first")
    assert not can_undo("form: when the model writes its own layout (harmony)")
    section = " ".join(_section("Conditions").split())
    for phrase in ("k of n failing steps hold without it", "plain loop", "is not named"):
        assert phrase in section


def test_every_shape_change_is_defined_in_its_order():
    assert list(_definitions("Shape changes")) == [change.name for change in SHAPE_CHANGES]


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def test_causes_are_named_only_through_their_definitions():
    """Outside ``audit/core/causes/`` no code writes a cause label as a bare string (only the mask check defines its
    own labels): every label the code emits is a cause module's ``NAME``, so it is one the contract defines."""
    labels = set(CAUSES) | set(LABEL_LINES)
    bare = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if CAUSES_PACKAGE in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or node.value not in labels or id(node) in docstrings:
                continue
            if not (path.name == "mask_compare.py" and node.value in LABEL_LINES):
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not bare, f"bare cause labels: {bare}"


def test_every_cause_is_emitted_somewhere():
    """Each cause's definition is used by code that labels failures (its ``NAME`` read outside its own module): the
    contract defines nothing the code never writes."""
    sources = {path: path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py")}
    unused = []
    for module in (path.stem for path in CAUSES_PACKAGE.glob("*.py")):
        text = (CAUSES_PACKAGE / f"{module}.py").read_text(encoding="utf-8")
        if not re.search(r"^NAME = ", text, re.M):
            continue
        users = [p for p, source in sources.items() if p.stem != module and f"{module}.NAME" in source]
        if not users:
            unused.append(module)
    assert not unused, f"causes no code emits: {unused}"
    assert len(CAUSES) == sum(1 for p in CAUSES_PACKAGE.glob("*.py") if re.search(r"^NAME = ", p.read_text(), re.M))


def test_the_code_cites_the_contract_in_the_repository():
    """No module or test cites a contract outside the repository (``SPEC``): they cite docs/contract.md."""
    citing = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in (PACKAGE, ROOT / "tests")
        for path in sorted(folder.rglob("*.py"))
        if path.name != "test_contract.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bSPEC\b|SPEC's|\.\./shared/SPEC", line)
    ]
    assert not citing, f"citations of SPEC: {citing}"
