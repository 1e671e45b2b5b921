"""The parse step (docs/contract.md "The parse step"): the rollout with each serving engine's parser, not the template's
message.

One completion through a parser as a loop does it (:mod:`.parsed_turns`); the rollout rendered from what the parser
made of each completion (:mod:`.parsed_rollout`), summed per variant into a parse result (:mod:`.parsed_totals`) and
per engine into its verdict (:mod:`.engine_verdicts`); values written in JSON's or the template's literal
(:mod:`.written_values`, :mod:`.value_literals`); calls written inside the reasoning (:mod:`.reasoning_calls`); and
the layouts a model writes around a call (:mod:`.call_layouts`), which the engines' parsers are compared on side by
side (:mod:`tito_audit.audit.disagreement`, an orchestrator above this step). The parsers themselves live in
:mod:`tito_audit.parse`.
"""
