"""The harness matrix (``tito-audit harnesses``, ``make harnesses``): real agent harnesses, as they ship, run against
the gateway in front of the stand-in engine; which share of what the model sampled each keeps trainable, and why not.

Harness names and pinned versions enter (:mod:`.catalogue`, one module per harness behind the interface of
:mod:`.harness`, installed apart from the project's own packages by :mod:`.install`); :mod:`.isolation` runs them
with nothing reachable beyond the machine, :mod:`.task` gives them a small task in a folder of their own,
:mod:`.group` runs every harness against one gateway (one model, one engine parser) and reads each rollout's record
(``GET /sessions``), :mod:`.rows` sums a row from those records, and :mod:`.publish` writes ``reports/harnesses.json``,
``.md`` and ``.html``, each row stored by its inputs (:mod:`.store`) so that a rerun with nothing changed rewrites
nothing.
"""
