"""What a session renders and tokenizes with: the audit's own loading, renderer, codec and stop tokens.

Loading a tokenizer takes about a second and a trainer opens one session per rollout, so the machinery is
built once per process for each (model source, template settings) and shared by every session opened with
the same arguments. Renders of one machinery go through its lock (the renderer keeps per-conversation preparation
state); no lock is shared between models, and none is held while another model loads, so a render stuck until its
time limit holds up only the sessions of its own model.
"""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from tito_audit.audit.public import CheckSetup, StopToken, collect_stop_tokens
from tito_audit.conversations.validate import check_stop_tokens
from tito_audit.errors import BadInputError
from tito_audit.model.load_by_id import load_by_id
from tito_audit.model.load_folder import LoadedModel, codec_for
from tito_audit.model.render import DEFAULT_CLOCK, Renderer, RenderLimits, frozen_clock
from tito_audit.model.tokens import TokenCodec
from tito_audit.model.variants import template_inputs
from tito_audit.parse.vllm_encoder import connect


@dataclass(frozen=True)
class ModelSourceSettings:
    """Where the model's files come from (the same rules as the command line's options)."""

    mirrors: tuple[Path, ...] = ()
    cache_dir: Path | None = None
    revision: str | None = None
    allow_hub: bool = True
    trust_remote_code: bool = False
    template_file: Path | None = None
    template_name: str | None = None

    @classmethod
    def of(
        cls,
        mirrors: Sequence[str | Path],
        cache_dir: str | Path | None,
        revision: str | None,
        allow_hub: bool,
        trust_remote_code: bool,
        template: str | Path | None,
        template_name: str | None,
    ) -> ModelSourceSettings:
        """The settings from what a caller passes (paths as strings or paths)."""
        return cls(
            mirrors=tuple(Path(m) for m in mirrors),
            cache_dir=Path(cache_dir) if cache_dir is not None else None,
            revision=revision,
            allow_hub=allow_hub,
            trust_remote_code=trust_remote_code,
            template_file=Path(template) if template is not None else None,
            template_name=template_name,
        )


@dataclass
class Machinery:
    """One model with one setting of its template's keyword arguments, ready to render and tokenize."""

    loaded: LoadedModel
    codec: TokenCodec
    renderer: Renderer
    stop_tokens: list[StopToken]
    setup: CheckSetup
    notes: list[str] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    proofs: dict[bool, Any] = field(default_factory=dict)
    """By whether a session declares tools: which steps a session may bridge without rendering the history
    (:func:`tito_audit.session.proof.proof_for`), proved once, on first use, under :attr:`proof_lock`."""
    proof_lock: threading.Lock = field(default_factory=threading.Lock)
    """Held while the proof is made: not :attr:`lock`, so the model's other sessions render meanwhile."""

    @cached_property
    def fingerprint(self) -> dict[str, str]:
        """What a session's ids and texts depend on in this machinery: its tokenizer's vocabulary (every token and id,
        hashed), its template and the template's keyword arguments (hashed), and the model's id (to name it)."""
        tokenizer = self.loaded.tokenizer
        vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
        return {
            "model": self.loaded.resolved.model_id,
            "tokenizer": _digest(vocabulary),
            "template": _digest([self.loaded.template_source, sorted(self.renderer.kwargs.items(), key=str)]),
        }

    @property
    def stop_ids(self) -> frozenset[int]:
        return self.setup.stop_ids

    def rendering(self, clock: datetime):
        """A context in which renders see ``clock`` through ``strftime_now`` (a session's clock is frozen at its
        start: a template that writes the date must not change it in the middle of an episode)."""
        return frozen_clock(self.loaded.template_source, clock)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")).hexdigest()[:32]


SESSION_LIMITS = RenderLimits(refuse_after_timeout=False)
"""The limits of a session's renders: those of an audit, but a render past them is one refused step."""


def build_machinery(
    loaded: LoadedModel,
    template_kwargs: Mapping[str, Any] | None = None,
    *,
    extra_stop_tokens: Sequence[str] = (),
    limits: RenderLimits | None = None,
) -> Machinery:
    """The machinery for an already loaded model (what :func:`machinery_for` caches)."""
    if loaded.text_level_only:
        raise BadInputError(
            f"{loaded.resolved.model_id}: only the chat template is available (no vocabulary); a session needs "
            "the model's real tokenizer to keep token ids"
        )
    connect(loaded)  # an engine-rendered model renders through vLLM's encoder, in vLLM's worker
    codec = codec_for(loaded)
    check_stop_tokens(codec, extra_stop_tokens)
    kwargs = dict(template_kwargs or {})
    notes: list[str] = []
    session_limits = limits or SESSION_LIMITS
    if loaded.template_source is not None:
        special = codec.tokenizer.special_tokens_map
        known = {item.name for item in template_inputs(loaded.template_source, special, session_limits)}
        for name in sorted(set(kwargs) - known):
            notes.append(f"template_kwargs: {name} is not read by the template as a keyword argument")
    elif kwargs and loaded.encoder is None:
        notes.append(f"template_kwargs are ignored: {loaded.backend} renders without a Jinja template")
    # The probes that find the stop tokens are refused as an audit refuses them: one render past the limit (or too
    # long) ends the opening of the session (TemplateTimeoutError), after one limit, not one per probe. Once open, a
    # render past the limit is one refused step of one rollout (a TitoBreak), never a refusal of the model for every
    # later session of the process.
    renderer = Renderer(loaded, codec, kwargs, replace(session_limits, refuse_after_timeout=True))
    with frozen_clock(loaded.template_source, DEFAULT_CLOCK):
        stop_tokens = collect_stop_tokens(renderer, codec, loaded.generation_eos_ids, extra_stop_tokens)
    renderer.limits = session_limits
    setup = CheckSetup.create(renderer, codec, [s.id for s in stop_tokens], seed=0)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    return Machinery(loaded, codec, renderer, stop_tokens, setup, notes)


_LOADED: dict[tuple, LoadedModel] = {}
_BUILT: dict[tuple, Machinery] = {}
_CACHE_LOCK = threading.Lock()
"""Guards the two caches and the table of key locks; never held while a model loads or a template renders."""
_KEY_LOCKS: dict[tuple, threading.Lock] = {}
MAX_CACHED = 8


def _lock_for(key: tuple) -> threading.Lock:
    """One lock per cache key: two threads opening sessions on one model load it once, and a model whose loading
    or first renders are slow holds up no session of another model."""
    with _CACHE_LOCK:
        if key not in _KEY_LOCKS and len(_KEY_LOCKS) >= 8 * MAX_CACHED:
            _KEY_LOCKS.clear()  # at worst, one later model is loaded twice at once
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def _cached(cache: dict[tuple, Any], key: tuple, make: Any) -> Any:
    with _CACHE_LOCK:
        found = cache.get(key)
    if found is not None:
        return found
    with _lock_for(key):
        with _CACHE_LOCK:
            found = cache.get(key)
        if found is not None:
            return found
        made = make()
        with _CACHE_LOCK:
            if len(cache) >= MAX_CACHED:
                cache.clear()
            cache[key] = made
        return made


def machinery_for(
    model: str,
    source: ModelSourceSettings,
    template_kwargs: Mapping[str, Any] | None,
    extra_stop_tokens: Sequence[str],
    limits: RenderLimits | None = None,
) -> Machinery:
    """Load (once per process) and build (once per template setting and render limits) the machinery for ``model``;
    a template file given by path is loaded again when it changed on disk."""
    template = source.template_file
    stamp = None
    if template is not None and template.is_file():
        stat = template.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    load_key = ("load", model, source, stamp)
    build_key = (
        "build",
        load_key,
        json.dumps(dict(template_kwargs or {}), sort_keys=True, default=str),
        tuple(extra_stop_tokens),
        limits,
    )

    def load() -> LoadedModel:
        return load_by_id(
            model,
            mirrors=source.mirrors,
            cache_dir=source.cache_dir,
            revision=source.revision,
            allow_hub=source.allow_hub,
            trust_remote_code=source.trust_remote_code,
            template_file=source.template_file,
            template_name=source.template_name,
        )

    def build() -> Machinery:
        loaded = _cached(_LOADED, load_key, load)
        return build_machinery(loaded, template_kwargs, extra_stop_tokens=extra_stop_tokens, limits=limits)

    return _cached(_BUILT, build_key, build)
