"""A known bug, written down so that it cannot be forgotten: the constants check reads the environment transformers
cached for the empty template, and guarding the empty template in the same process intercepts ``**`` there, so
Jinja's folding stops and the check sees no constant. Fixed with the next republish (the fix changes the code the
published matrix's results keys are made from)."""

from __future__ import annotations

import pytest

from tito_audit.model.render import guarded_template
from tito_audit.model.render_constants import constant_refusal

SOURCE = "{{ 9 ** (9 ** 9) }} isolation"


def test_the_constants_check_refuses_a_huge_power():
    refusal = constant_refusal(SOURCE, 100_000, 2**28)
    assert refusal is not None and "bits" in refusal[1]


@pytest.mark.xfail(strict=True, reason="known bug: guarding the empty template blinds the constants check")
def test_guarding_the_empty_template_leaves_the_constants_check_as_it_was():
    guarded_template("")
    assert constant_refusal(SOURCE + " ", 100_000, 2**28) is not None
