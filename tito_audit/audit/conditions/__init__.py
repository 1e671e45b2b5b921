"""When a verdict breaks (docs/contract.md, Verdicts: "Conditions"): the tags each step is drawn under, and what they
sum to.

:mod:`.step_conditions` tags each rollout step with the form and shapes it was drawn under (where the steps are
walked: the checks and the parse step); :mod:`.verdict_conditions` sums the tagged steps into the plain loop's
verdict and the conditions a verdict breaks under; :mod:`.result_conditions` holds their result types (plain
dataclasses, part of the JSON report).
"""
