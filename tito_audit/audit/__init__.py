"""The audit: a loaded model and its conversations in; an :class:`~tito_audit.audit.results.AuditReport` out.

Per variant (:mod:`.variant`): accept each conversation, realize its turns, simulate the rollout and run the
checks (:mod:`.checks`), then the findings (:mod:`.findings`), the verdict and the recommended setting.
"""
