"""The way-out search audits each template text once: an audit it asks for again (two fixes whose edits give the same
text) is answered from what it already audited, with a copy, while a budget that counts audits is charged as before."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import SimpleNamespace

import pytest

from tito_audit.audit.audit_options import AuditOptions
from tito_audit.matrix.matrix_options import MatrixOptions
from tito_audit.matrix.tasks import WayOutOverBudget, budgeted
from tito_audit.repair.way_out import remembering


@dataclass
class FakeReport:
    source: str
    variants: list[str] = field(default_factory=lambda: ["default", "thinking=true"])


SETTINGS = AuditOptions(seed=1)
"""One settings object, as the search passes the same one to every audit (its tool set compares by identity)."""


def model(source: str, origin: str = "patched"):
    return SimpleNamespace(template_source=source, template_origin=origin, template_name=None)


def counting_runner():
    calls: list[str] = []

    def run(loaded, options):
        calls.append(loaded.template_source)
        return FakeReport(loaded.template_source)

    return run, calls


def test_the_same_text_and_settings_are_audited_once_and_answered_with_a_copy():
    run, calls = counting_runner()
    search = remembering(run)
    first = search(model("A"), SETTINGS)
    again = search(model("A"), replace(SETTINGS))
    assert calls == ["A"]
    assert again == first and again is not first, "a copy: a caller that changes one report changes no other"
    again.variants.append("mutated")
    assert search(model("A"), SETTINGS).variants == ["default", "thinking=true"]


def test_the_memory_is_bounded_in_bytes_forgetting_the_oldest_first():
    """Reports of about 10 kB each under a 25 kB limit: two are kept, the third forgets the first."""
    calls: list[str] = []

    def run(loaded, options):
        calls.append(loaded.template_source)
        return FakeReport(loaded.template_source * 10_000)

    search = remembering(run, limit_bytes=25_000)
    for source in ["A", "B", "C", "B", "C", "A"]:
        search(model(source), SETTINGS)
    assert calls == ["A", "B", "C", "A"], "B and C answered from memory; A forgotten when C was kept"


@pytest.mark.parametrize(
    "other",
    [
        (model("B"), SETTINGS),
        (model("A", origin="training form"), SETTINGS),
        (model("A"), replace(SETTINGS, seed=2)),
        (model("A"), replace(SETTINGS, parser="vllm")),
        (model("A"), AuditOptions(seed=1)),  # another tool set: audited again, never wrongly remembered
    ],
)
def test_another_text_origin_or_setting_is_audited(other):
    run, calls = counting_runner()
    search = remembering(run)
    search(model("A"), SETTINGS)
    search(*other)
    assert len(calls) == 2


def test_a_budget_that_counts_audits_is_charged_for_remembered_ones(tmp_path):
    """The matrix wraps the memory inside the corpus's budget: the third request passes a budget of two audits of two
    variants each although only one template was ever audited, exactly as without the memory."""
    run, calls = counting_runner()
    report = FakeReport("original")
    search = budgeted(remembering(run), report, MatrixOptions(out_dir=tmp_path, way_out_budget=4))  # type: ignore[arg-type]
    search(model("A"), SETTINGS)
    search(model("A"), SETTINGS)
    with pytest.raises(WayOutOverBudget):
        search(model("A"), SETTINGS)
    assert calls == ["A"]
