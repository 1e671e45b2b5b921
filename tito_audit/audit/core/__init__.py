"""The core below the audit's steps: an append-only buffer against the next prompt, and why the two part.

:mod:`.join` decides a buffer against the next prompt (is it a prefix, in tokens and in text), :mod:`.diff`
locates where two sequences part (with the tokens around it) and :mod:`.causes` labels a divergence between an
earlier and a later text: one module per cause label, each its definition (docs/contract.md "Cause labels"), its
detector and a confirmation of its own, in the table every reader uses (:data:`.causes.CAUSES`). Every step of the audit
reads them (the realization, the checks, the parse step, the findings), and so do the session
(:mod:`tito_audit.session`) and, through it, the gateway: a loop at run time decides and labels a break exactly as the
audit does. They import nothing of the audit but its result types.
"""
