"""``--engine llamacpp:PATH``: a real model sampling on CPU in this process, through llama.cpp (``llama-cpp-python``,
the ``llamacpp`` install extra), token ids in and token ids out.

The GGUF file is loaded once (``n_ctx`` tokens of context, at most the model's own); each turn takes the prompt ids
as they are (no tokenizing in the engine), and ``Llama.generate`` yields the sampled ids one at a time. Each id's
log-probability is read from the raw logits it was sampled from (``log_softmax`` at temperature 1, before top-k and
top-p: vLLM's default ``raw_logprobs``), with the ``K`` most likely when asked. The turn ends at a stop id (kept, as
vLLM keeps it), at a ``stop`` string or at ``max_tokens`` (cut by the length limit). Generation is one at a time
(llama.cpp's context is not shared between threads), and every prompt is evaluated whole: llama.cpp's evaluation of a
prompt whose start it kept from the last one differs from a fresh one in the last digits, enough to change a sampled
id, and the same prompt with the same seed must sample the same ids whatever ran before.

Sampling follows the request: ``temperature`` (1.0; 0 is greedy), ``top_p`` (1.0), ``top_k`` (0: all), ``min_p`` (0),
``repetition_penalty`` (1.0), ``presence_penalty``/``frequency_penalty`` (0), ``seed``; without a seed, each turn's
seed is drawn from the engine's ``--seed``, the session id and the turn, so that a run repeats.

The GGUF's vocabulary must be the served model's: at load, sample texts (prose, code, numbers, accents, CJK, emoji,
runs of spaces and the model's special tokens) are tokenized by both, and a difference refuses the engine in one
line naming the first text that differs.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from tito_audit.errors import BadInputError
from tito_audit.gateway.sampling_engines import EngineError, EngineOutput, EngineRequest
from tito_audit.model.tokens import TokenCodec

PREFIX = "llamacpp:"
INSTALL = "pip install -e '.[llamacpp]' -c constraints.txt (llama-cpp-python builds from source: about 10 minutes)"
CONTEXT = 8192
"""Tokens of context the engine loads (at most the model's own): a KV cache of a few hundred MiB for small models."""
SAMPLE_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b  # two spaces, then four\n",
    '{"city": "Paris", "days": 3, "unit": "celsius"}',
    "3.14159 + 2,718 = 5.86; 2026-01-15T09:30:00Z",
    "Café, naïve, São Paulo, Zürich, Ελληνικά, русский",
    "東京は晴れです。今日の天気を教えてください。",
    "Emoji: 🙂🚀👍🏽 and tabs\tand\n\nnewlines   with   runs of spaces",
)


class LlamaCppEngine:
    """A GGUF model in process (see the module docstring); ``codec`` is the served model's tokenizer."""

    def __init__(
        self, path: str | Path, codec: TokenCodec, *, seed: int = 0, n_ctx: int = CONTEXT, threads: int | None = None
    ) -> None:
        try:
            import llama_cpp
        except ImportError:
            raise BadInputError(f"--engine llamacpp needs llama-cpp-python: {INSTALL}") from None
        path = Path(path)
        if not path.is_file():
            raise BadInputError(f"--engine llamacpp:{path}: no such GGUF file")
        self.path = path
        self.seed = seed
        self._codec = codec
        self._lock = threading.Lock()
        try:
            self._llama = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=threads or os.cpu_count() or 1,
                seed=seed,
                logits_all=False,
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise BadInputError(f"--engine llamacpp:{path}: llama.cpp cannot load it ({_one_line(exc)})") from None
        self.n_ctx = min(int(self._llama.n_ctx()), int(self._llama._model.n_ctx_train()))
        self.n_vocab = int(self._llama.n_vocab())
        self.name = f"llama.cpp ({path.name}, {self.n_ctx} tokens of context)"
        check_vocabulary(self._llama, codec, path)

    async def close(self) -> None:
        return None

    async def generate(self, request: EngineRequest) -> EngineOutput:
        return await asyncio.to_thread(self.sample, request)

    def sample(self, request: EngineRequest) -> EngineOutput:
        import numpy

        sampling = request.sampling
        prompt = list(request.prompt_ids)
        limit = int(sampling.get("max_tokens") or 16)
        if len(prompt) + limit > self.n_ctx:
            raise EngineError(
                400,
                "context_length_exceeded",
                f"the prompt ({len(prompt)} tokens) and max_tokens ({limit}) pass the llama.cpp engine's context of "
                f"{self.n_ctx} tokens",
            )
        if any(token >= self.n_vocab for token in prompt):
            raise EngineError(400, "invalid_request", f"the prompt holds ids past the GGUF's {self.n_vocab} tokens")
        stops = set(request.stop_ids)
        texts = _stop_texts(sampling.get("stop"))
        ids: list[int] = []
        values: list[float | None] = []
        top: list[list[tuple[int, float]]] = []
        finish = "length"
        with self._lock:
            llama = self._llama
            llama.reset()  # no prompt cache: see the module docstring
            llama.set_seed(self._seed_for(request))
            for token in llama.generate(prompt, reset=True, **_knobs(sampling)):
                logits = numpy.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(self.n_vocab,))
                logprobs = _log_softmax(numpy, logits)
                ids.append(int(token))
                values.append(float(logprobs[token]))
                if request.top_logprobs:
                    best = numpy.argpartition(-logprobs, request.top_logprobs)[: request.top_logprobs]
                    top.append(sorted(((int(i), float(logprobs[i])) for i in best), key=lambda pair: -pair[1]))
                if token in stops or (texts and _ends_a_stop(self._codec, ids, texts)):
                    finish = "stop"
                    break
                if len(ids) >= limit:
                    break
        return EngineOutput(ids, finish, None, values, top if request.top_logprobs else None)

    def _seed_for(self, request: EngineRequest) -> int:
        given = request.sampling.get("seed")
        if given is not None:
            return int(given) & 0x7FFFFFFF
        key = f"{self.seed}:{request.session_id}:{request.turn}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


def check_vocabulary(llama: Any, codec: TokenCodec, path: Path) -> None:
    """Refuse (one line) a GGUF whose ids are not the served model's: the sample texts and the model's special
    tokens must tokenize to the same ids in both. Special tokens past the GGUF's vocabulary (Gemma 3 4B's image
    tokens, which the text-only 270M lacks) are left out: the model never samples them, and a prompt holding one is
    refused at its turn."""
    size = int(llama.n_vocab())
    specials = " ".join(sorted(text for text, i in codec.control_ids_by_text.items() if i < size)[:64])
    for text in (*SAMPLE_TEXTS, specials):
        ours = codec.encode(text)
        theirs = list(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))
        if ours != theirs:
            where = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
            where = min(len(ours), len(theirs)) if where is None else where
            raise BadInputError(
                f"--engine llamacpp:{path}: the GGUF's vocabulary is not the model's tokenizer: {text[:40]!r} is "
                f"{theirs[where : where + 3]} at token {where} in the GGUF and {ours[where : where + 3]} in the "
                "tokenizer; serve the model this GGUF was made from"
            )


def make_llamacpp(engine: str, codec: TokenCodec, seed: int) -> LlamaCppEngine:
    """The engine ``--engine llamacpp:PATH`` names."""
    return LlamaCppEngine(engine[len(PREFIX) :], codec, seed=seed)


def _knobs(sampling: dict[str, Any]) -> dict[str, Any]:
    """The request's sampling parameters as ``Llama.generate`` names them, with the defaults of an OpenAI server."""
    return {
        "temp": float(sampling.get("temperature", 1.0)),
        "top_p": float(sampling.get("top_p", 1.0)),
        "top_k": int(sampling.get("top_k", 0)),
        "min_p": float(sampling.get("min_p", 0.0)),
        "repeat_penalty": float(sampling.get("repetition_penalty", 1.0)),
        "presence_penalty": float(sampling.get("presence_penalty", 0.0)),
        "frequency_penalty": float(sampling.get("frequency_penalty", 0.0)),
    }


def _log_softmax(numpy: Any, logits: Any) -> Any:
    shifted = logits.astype(numpy.float64) - float(logits.max())
    return shifted - numpy.log(numpy.exp(shifted).sum())


def _stop_texts(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(s for s in stop if isinstance(s, str) and s)


def _ends_a_stop(codec: TokenCodec, ids: list[int], texts: tuple[str, ...]) -> bool:
    """Whether the completion's text now holds a stop string (its last tokens decoded: enough for any of them)."""
    window = max(len(t) for t in texts) + 8
    return any(text in codec.decode(ids[-window:]) for text in texts)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__
