"""Formatters turn an :class:`~tito_audit.results.AuditReport` into terminal output, JSON or Markdown."""
