"""The static analysis a template gets before any render (its settings, the values it reads them as) costs what the
template's length does, not its square: a chain of locals set one from another is followed once per setting."""

from __future__ import annotations

import threading

from tito_audit.model.setting_types import value_aliases
from tito_audit.model.variants import parse_template, template_inputs

BUDGET = 30.0
"""Seconds given to what takes well under one (a fixed budget, not a speed test: the fixpoint took 101 s)."""


def chain(length: int) -> str:
    """``length`` locals, each set from the one before, the first from a setting, the last tested and compared."""
    sets = "".join(f"{{% set a{i} = a{i - 1} %}}" for i in range(1, length))
    last = f"a{length - 1}"
    return (
        "{% set a0 = reasoning_effort %}"
        + sets
        + f"{{% if {last} %}}x{{% endif %}}{{% if {last} == 'low' %}}y{{% endif %}}"
    )


def test_a_long_chain_of_locals_is_followed_within_a_budget():
    found: list = []
    worker = threading.Thread(target=lambda: found.append(template_inputs(chain(2000))), daemon=True)
    worker.start()
    worker.join(timeout=BUDGET)
    assert not worker.is_alive(), f"the analysis of 2,000 chained locals took more than {BUDGET:g}s"
    (setting,) = found[0]
    assert setting.name == "reasoning_effort" and "low" in setting.values, "the last local still reads the setting"


def test_aliases_follow_chains_and_cycles_as_the_fixpoint_did():
    ast = parse_template(
        "{% set a = b %}{% set b = a %}{% set c = a if x else 'k' %}{% set d = c | default('z') %}{% set e = 'plain' %}"
    )
    every = value_aliases(ast)
    assert every == {"a": {"a", "b"}, "b": {"a", "b"}, "c": {"a", "b"}, "d": {"a", "b", "c"}, "e": set()}
    assert value_aliases(ast, ["b", "x"]) == {"a": {"b"}, "b": {"b"}, "c": {"b"}, "d": {"b"}, "e": set()}
