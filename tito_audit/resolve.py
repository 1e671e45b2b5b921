"""Compatibility: model resolution moved to :mod:`tito_audit.model.resolve` (this path was documented).

New code: ``from tito_audit import resolve_model`` or ``from tito_audit.model.resolve import resolve_model``.
"""

from tito_audit.model.resolve import ResolvedModel, resolve_model

__all__ = ["ResolvedModel", "resolve_model"]
