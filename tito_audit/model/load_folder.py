"""Load a resolved model: its tokenizer, its chat template(s) and its generation config."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit import inputs
from tito_audit.errors import BadInputError, ModelLoadError, TemplateMissingError
from tito_audit.model.boundary_types import HFTokenizer
from tito_audit.model.engine_rendered import ENGINE_ENCODER, EngineEncoder, encoder_of_folder
from tito_audit.model.render_memo import RenderMemo
from tito_audit.model.resolve import ResolvedModel, staged_folder
from tito_audit.model.standin import build_standin_tokenizer, has_vocabulary
from tito_audit.model.threads import first_import
from tito_audit.model.tokens import TokenCodec
from tito_audit.model.variants import check_syntax

JINJA = "jinja"
MISTRAL_COMMON = "mistral-common"


@dataclass
class LoadedModel:
    """A tokenizer ready to audit, with the template chosen for the audit."""

    resolved: ResolvedModel
    tokenizer: HFTokenizer
    backend: str
    """``jinja`` (rendered through ``apply_chat_template``'s Jinja), ``mistral-common`` (no Jinja) or
    ``vllm-encoder`` (no template: vLLM's encoder for the architecture renders it, :mod:`.engine_rendered`)."""
    tokenizer_class: str
    template_name: str | None
    template_source: str | None
    """The Jinja source audited; None for backends that render without Jinja."""
    template_origin: str
    """Where the template came from: ``tokenizer``, a file path given by ``--template``, or the backend."""
    available_templates: tuple[str, ...] = ()
    generation_eos_ids: tuple[int, ...] = ()
    generation_config_found: bool = False
    file_hashes: dict[str, str] = field(default_factory=dict)
    text_level_only: bool = False
    """No vocabulary: a stand-in tokenizer renders the template; token-level results are not claimed."""
    notes: list[str] = field(default_factory=list)
    renders: RenderMemo = field(default_factory=RenderMemo, repr=False, compare=False)
    """Renders remembered by the renderers that keep them (an audit's, a fix's proof), for this model and every copy
    of it with another template (:mod:`tito_audit.model.render_memo`)."""
    encoder: EngineEncoder | None = None
    """The engine's encoder that renders an engine-rendered model (backend ``vllm-encoder``), else None."""
    engine_renderer: Any = None
    """What runs that encoder (an :class:`~tito_audit.model.engine_rendered.EncoderRenderer`), connected by the stage
    that can reach vLLM's worker (:func:`tito_audit.parse.vllm_encoder.connect`); None until then."""

    @property
    def renders_through(self) -> str:
        """How prose names what renders a model without a Jinja template: ``rendered by vLLM's DeepSeek V4 encoder
        (no Jinja template)``, ``renders through mistral-common``."""
        return self.encoder.rendered_by if self.encoder is not None else f"renders through {self.backend}"

    @property
    def template_sha256(self) -> str | None:
        if self.template_source is None:
            return None
        return hashlib.sha256(self.template_source.encode("utf-8")).hexdigest()


def codec_for(loaded: LoadedModel) -> TokenCodec:
    """The token view of a loaded model the way the audit uses it: mistral-common tokenizes message by message (an
    engine's encoder hands over text, tokenized whole as a template's render is); the template's own added tokens cut
    the tokenization cache."""
    return TokenCodec(
        loaded.tokenizer,
        piecewise_control_tokens=loaded.backend == MISTRAL_COMMON,
        template_source=loaded.template_source,
    )


def _remote_code_files(folder: Path) -> list[str]:
    """Python files the tokenizer config asks transformers to import (``auto_map``)."""
    config_path = folder / "tokenizer_config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    auto_map = config.get("auto_map") or {}
    entries: list[str] = []
    for value in auto_map.values() if isinstance(auto_map, dict) else []:
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str) and "." in ref:
                entries.append(ref.split("--")[-1].rsplit(".", 1)[0] + ".py")
    return sorted(set(entries))


def _read_generation_eos(folder: Path) -> tuple[tuple[int, ...], bool]:
    path = folder / "generation_config.json"
    if not path.is_file():
        return (), False
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelLoadError(f"{path}: generation_config.json is not valid JSON ({exc})") from exc
    eos = config.get("eos_token_id")
    if isinstance(eos, int):
        return (eos,), True
    if isinstance(eos, list):
        return tuple(i for i in eos if isinstance(i, int)), True
    return (), True


def _load_tokenizer(folder: Path, trust_remote_code: bool) -> Any:
    """The folder's tokenizer, loaded under the lock of first imports: transformers imports the tokenizer's class,
    its converter and mistral-common lazily inside ``from_pretrained`` (:mod:`tito_audit.model.threads`). Loads
    hold the GIL nearly throughout, so taking turns costs little (eight mirror models from eight threads: 4.6 s
    at once, 4.8 s in turn)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    with first_import():
        return _load_tokenizer_now(folder, trust_remote_code)


def _load_tokenizer_now(folder: Path, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return AutoTokenizer.from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=trust_remote_code
            )
        except ImportError as exc:
            hint = (
                " (install the 'mistral' extra: pip install 'tito-audit[mistral]')"
                if "mistral" in str(exc).lower()
                else ""
            )
            raise ModelLoadError(f"cannot load tokenizer from {folder}: {exc}{hint}") from exc
        except Exception as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"cannot load tokenizer from {folder}: {first_line}") from exc


def _templates_of(tokenizer: HFTokenizer) -> dict[str, str]:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str):
        return {"default": template}
    if isinstance(template, dict):
        return {str(k): v for k, v in template.items() if isinstance(v, str)}
    return {}


def _load_standin(
    folder: Path, defaults: Mapping[str, str], known: Sequence[str] = ()
) -> tuple[Any, tuple[int, ...], bool, list[str]]:
    """Stand-in tokenizer of a template-only folder, with generation eos ids mapped onto it."""
    tokenizer, config_ids, placeholders = build_standin_tokenizer(folder, defaults, known)
    real_eos, found = _read_generation_eos(folder)
    mapped = []
    for token_id in real_eos:
        text = config_ids.get(token_id)
        if text is not None and tokenizer.convert_tokens_to_ids(text) is not None:
            mapped.append(tokenizer.convert_tokens_to_ids(text))
    notes = ["no vocabulary: audited at text level with a stand-in byte-level tokenizer (no token-level claims)"]
    if placeholders:
        notes.append("special tokens named by no config, replaced by placeholders: " + ", ".join(placeholders))
    return tokenizer, tuple(mapped), found, notes


def load_model(
    resolved: ResolvedModel,
    *,
    template_file: Path | None = None,
    template_name: str | None = None,
    trust_remote_code: bool = False,
    special_token_defaults: Mapping[str, str] | None = None,
    known_special_tokens: Sequence[str] = (),
) -> LoadedModel:
    """Load the tokenizer of ``resolved`` and pick the chat template to audit.

    The template is, in order: the file given by ``template_file``; the tokenizer's template named
    ``template_name``; its ``tool_use`` template when it has several (the one transformers picks for
    tool conversations); its only or ``default`` template.

    A folder with a chat template but no vocabulary is loaded with a stand-in tokenizer
    (:mod:`tito_audit.model.standin`) and marked ``text_level_only``; ``special_token_defaults`` fill in
    bos/eos tokens its configs do not name, ``known_special_tokens`` are control tokens the model is known to have
    (the registry's stop tokens).
    """
    text_level_only = not has_vocabulary(resolved.files())
    remote = _remote_code_files(resolved.path)
    if remote and not trust_remote_code and not text_level_only:
        raise ModelLoadError(
            f"{resolved.model_id} needs remote code ({', '.join(remote)} would run); "
            "pass --trust-remote-code to allow it"
        )
    with staged_folder(resolved) as folder:
        if text_level_only:
            tokenizer, eos_ids, has_generation_config, notes = _load_standin(
                folder, special_token_defaults or {}, known_special_tokens
            )
        else:
            notes = []
            tokenizer = _load_tokenizer(folder, trust_remote_code)
            eos_ids, has_generation_config = _read_generation_eos(folder)
    backend = MISTRAL_COMMON if type(tokenizer).__name__ == "MistralCommonBackend" else JINJA
    templates = _templates_of(tokenizer) if backend == JINJA else {}

    origin = "tokenizer"
    encoder: EngineEncoder | None = None
    if template_file is not None:
        try:
            source = inputs.read_text(Path(template_file), "--template", inputs.MAX_TEMPLATE_BYTES)
        except BadInputError as exc:
            raise TemplateMissingError(f"cannot read template file: {exc}") from exc
        if backend != JINJA:
            raise TemplateMissingError(
                f"{resolved.model_id} renders through {backend}, which takes no Jinja template override"
            )
        chosen_name, origin = None, str(template_file)
    elif backend != JINJA:
        source, chosen_name, origin = None, None, backend
    elif template_name is not None:
        if template_name not in templates:
            names = ", ".join(sorted(templates)) or "none"
            raise TemplateMissingError(
                f"{resolved.model_id} has no chat template named '{template_name}' (available: {names})"
            )
        source, chosen_name = templates[template_name], template_name
    elif not templates:
        encoder = _engine_encoder(resolved, text_level_only)
        backend, source, chosen_name, origin = ENGINE_ENCODER, None, None, f"{encoder.label} ({encoder.source})"
        notes.append(
            f"{encoder.rendered_by}: vLLM picks it for the architecture config.json names, and it writes the prompt, "
            f"the history and the generation prompt; it reads {', '.join(encoder.reads)} (no Jinja source to sweep "
            "settings from: pass them with --kwarg)"
        )
    else:
        chosen_name = (
            "tool_use" if "tool_use" in templates else ("default" if "default" in templates else sorted(templates)[0])
        )
        source = templates[chosen_name]
    if source is not None:
        problem = check_syntax(source)
        if problem is not None:
            raise TemplateMissingError(f"chat template of {resolved.model_id} ({origin}) is not valid Jinja: {problem}")
    return LoadedModel(
        resolved=resolved,
        tokenizer=tokenizer,
        backend=backend,
        tokenizer_class="stand-in (byte-level, no vocabulary)" if text_level_only else type(tokenizer).__name__,
        template_name=chosen_name,
        template_source=source,
        template_origin=origin,
        available_templates=tuple(sorted(templates)),
        generation_eos_ids=eos_ids,
        generation_config_found=has_generation_config,
        file_hashes=resolved.file_hashes(),
        text_level_only=text_level_only,
        notes=notes,
        encoder=encoder,
    )


def _engine_encoder(resolved: ResolvedModel, text_level_only: bool) -> EngineEncoder:
    """The encoder vLLM renders a folder without a chat template with (the engine-rendered kind), or the error that
    says the folder has no template."""
    encoder = None if text_level_only else encoder_of_folder(resolved.files())
    if encoder is None:
        raise TemplateMissingError(f"{resolved.model_id} has no chat template; pass one with --template FILE")
    if not encoder.renders_text:
        raise TemplateMissingError(
            f"{resolved.model_id} ships no chat template: vLLM renders it with {encoder.label} ({encoder.source}), "
            "which hands the engine token ids rather than text; tito-audit does not audit such a model yet (pass a "
            "template with --template FILE)"
        )
    return encoder
