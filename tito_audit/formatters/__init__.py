"""Formatters turn an :class:`~tito_audit.audit.results.AuditReport` into terminal output, JSON or Markdown."""
