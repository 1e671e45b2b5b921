"""Compatibility: the audit service moved to :mod:`tito_audit.audit.service` (this path was documented).

New code: ``from tito_audit import audit, AuditOptions`` or ``from tito_audit.audit.service import audit``.
"""

from tito_audit.audit.service import DEFAULT_COUNT, SCHEMA_VERSION, AuditOptions, VariantAudit, audit

__all__ = ["DEFAULT_COUNT", "SCHEMA_VERSION", "AuditOptions", "VariantAudit", "audit"]
