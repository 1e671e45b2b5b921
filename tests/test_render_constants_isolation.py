"""The constants check folds constants in an environment of its own: guarding the empty template in the same process
(which intercepts ``**`` in the environment transformers caches for it) once blinded the check, and a constant power
of a hostile template then hung the compile."""

from __future__ import annotations

from tito_audit.model.render import guarded_template
from tito_audit.model.render_constants import constant_refusal

SOURCE = "{{ 9 ** (9 ** 9) }} isolation"


def test_the_constants_check_refuses_a_huge_power():
    refusal = constant_refusal(SOURCE, 100_000, 2**28)
    assert refusal is not None and "bits" in refusal[1]


def test_guarding_the_empty_template_leaves_the_constants_check_as_it_was():
    guarded_template("")
    assert constant_refusal(SOURCE + " ", 100_000, 2**28) is not None
