"""Resolve and load a model the one way every entry point does (commands, matrix, the session guard)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tito_audit.errors import BadInputError
from tito_audit.model.load_folder import LoadedModel, load_model
from tito_audit.model.registry import family_of, registry_stop_tokens
from tito_audit.model.resolve import ResolvedModel, resolve_model


def load_by_id(
    model: str,
    *,
    mirrors: Sequence[Path] = (),
    cache_dir: Path | None = None,
    revision: str | None = None,
    allow_hub: bool = True,
    trust_remote_code: bool = False,
    template_file: Path | None = None,
    template_name: str | None = None,
) -> LoadedModel:
    """Resolve ``model`` (hub id or folder) through the mirrors, cache and hub rules and load it, with the
    registry's special-token defaults for its family (template-only folders need them)."""
    if template_file is not None and not Path(template_file).exists():
        raise BadInputError(f"--template {template_file}: no such file")
    if template_file is not None and Path(template_file).is_dir():
        raise BadInputError(f"--template {template_file}: a folder, not a file")
    resolved = resolve_model(
        model,
        mirrors=[Path(m) for m in mirrors],
        cache_dir=Path(cache_dir) if cache_dir is not None else None,
        revision=revision,
        allow_hub=allow_hub,
        trust_remote_code=trust_remote_code,
    )
    return load_resolved(
        resolved,
        template_file=Path(template_file) if template_file is not None else None,
        template_name=template_name,
        trust_remote_code=trust_remote_code,
    )


def load_resolved(
    resolved: ResolvedModel,
    *,
    template_file: Path | None = None,
    template_name: str | None = None,
    trust_remote_code: bool = False,
) -> LoadedModel:
    """Load a resolved model with the registry's facts for its id: the special-token defaults of its family and
    its known stop tokens (template-only folders need both)."""
    family = family_of(resolved.model_id)
    stops = registry_stop_tokens(resolved.model_id)
    return load_model(
        resolved,
        template_file=template_file,
        template_name=template_name,
        trust_remote_code=trust_remote_code,
        special_token_defaults=family.special_tokens if family else None,
        known_special_tokens=stops.texts if stops else (),
    )
