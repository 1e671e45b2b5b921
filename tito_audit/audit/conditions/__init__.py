"""When a verdict breaks (docs/contract.md, Verdicts: "Conditions"): the tags each step is drawn under, and what they
sum to.

:mod:`.step_conditions` tags each rollout step with the form and shapes it was drawn under (where the steps are
walked: the checks and the parse step); :mod:`.undoings` walks a failing step again with one condition undone;
:mod:`.verdict_conditions` sums the tagged steps into the plain loop's verdict and the conditions a verdict breaks
under. Their result types are the report's (:mod:`tito_audit.audit.result_conditions`, beside
:mod:`tito_audit.audit.results`): this package computes them and is not imported by them.
"""
