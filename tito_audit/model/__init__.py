"""The model: a model id (or folder) in; its tokenizer, chat template, variants and renders out.

Resolution (:mod:`.resolve`), loading (:mod:`.load_folder`: a folder's tokenizer, template and generation config;
:mod:`.load_by_id`: resolved and loaded the one way every entry point does; stand-ins for template-only folders), the
template's keyword arguments (:mod:`.variants`), rendering (:mod:`.render`) and tokenization (:mod:`.tokens`).
"""

from importlib import import_module
from typing import Any

__all__ = ["JINJA", "MISTRAL_COMMON", "LoadedModel", "codec_for", "load_model"]


def __getattr__(name: str) -> Any:
    """``from tito_audit.model import load_model`` (imported on first use: the submodules stay light to import)."""
    if name in __all__:
        return getattr(import_module("tito_audit.model.load_folder"), name)
    raise AttributeError(f"module 'tito_audit.model' has no attribute {name!r}")
