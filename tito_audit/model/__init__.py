"""The model: a model id (or folder) in; its tokenizer, chat template, variants and renders out.

Resolution (:mod:`.resolve`), loading (:mod:`.loaded`, :mod:`.loading`, stand-ins for template-only folders), the
template's keyword arguments (:mod:`.variants`), rendering (:mod:`.render`) and tokenization (:mod:`.tokens`).
"""

from tito_audit.model.loaded import JINJA, MISTRAL_COMMON, LoadedModel, codec_for, load_model

__all__ = ["JINJA", "MISTRAL_COMMON", "LoadedModel", "codec_for", "load_model"]
