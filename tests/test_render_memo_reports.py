"""Remembered renders never change a report (issue 53): the audit a user runs on real models gives the same JSON
report, byte for byte (timestamps and durations aside), with the memory of renders and without it."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.formatters.json_report import VOLATILE_KEYS, report_to_dict
from tito_audit.model.load_by_id import load_by_id
from tito_audit.model.render_direct import DirectTemplate

pytestmark = [requires_shared, pytest.mark.shared]

MODELS = ["Qwen/Qwen3-4B", "google/gemma-4-E2B-it"]
"""A hybrid reasoning template, and one of six variants whose renders the memory shares most."""


def _report(model_id: str) -> str:
    loaded = load_by_id(model_id, mirrors=[SHARED_TOKENIZERS], allow_hub=False)  # a fresh memory of renders
    document = report_to_dict(audit(loaded, AuditOptions(count=12, seed=0, parser="sglang")))
    for key in VOLATILE_KEYS:
        document.pop(key)
    return json.dumps(document, sort_keys=True)


@pytest.mark.parametrize("model_id", MODELS)
def test_the_report_is_the_same_with_and_without_remembered_renders(model_id, monkeypatch):
    hits: list[object] = []
    real = DirectTemplate.remembered

    def counted(self, prepared, k, gp):
        outcome = real(self, prepared, k, gp)
        if outcome is not None:
            hits.append(outcome)
        return outcome

    with monkeypatch.context() as patch:
        patch.setattr(DirectTemplate, "remembered", counted)
        remembered = _report(model_id)
    assert hits, "the audit took no render from the memory: the comparison would show nothing"
    with monkeypatch.context() as patch:
        patch.setattr(DirectTemplate, "remembered", lambda self, prepared, k, gp: None)
        patch.setattr(DirectTemplate, "remember", lambda self, prepared, k, gp, outcome: None)
        fresh = _report(model_id)
    assert remembered == fresh
