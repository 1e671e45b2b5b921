"""The CI gate: a report (and a baseline) in; which requirements hold out (``tito-audit check``)."""
