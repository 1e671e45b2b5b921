"""``--engine llamacpp:PATH``: a real model sampling on CPU through llama.cpp (``llama-cpp-python``, the ``llamacpp``
install extra), token ids in and token ids out, in a process of its own (:mod:`.llamacpp_process`).

llama.cpp runs in that process, never in the gateway's: a library that dies (an illegal instruction on a CPU its build
does not fit, a segmentation fault, the out-of-memory killer) ends that process only. The turn it was sampling is
answered 502 ``engine_crashed`` in one line naming how it ended (``the llama.cpp engine process (pid N) died of
SIGILL (illegal instruction: ...)``), and the next turn starts it again. At start the engine loads the model, checks
its vocabulary and samples one token; where it cannot, ``serve`` refuses to start in one line (exit 2). The process
ends with the gateway (see :mod:`.llamacpp_process`).

The GGUF file is loaded once (``n_ctx`` tokens of context, at most the model's own); each turn takes the prompt ids
as they are (no tokenizing in the engine), and ``Llama.generate`` samples the ids one at a time, each handed to the
gateway, which decides where the turn ends. Each id's log-probability is read from the raw logits it was sampled from
(``log_softmax`` at temperature 1, before top-k and top-p: vLLM's default ``raw_logprobs``), with the ``K`` most likely
when asked. The turn ends at a stop id (kept, as vLLM keeps it), at a ``stop`` string or at ``max_tokens`` (cut by the
length limit). Generation is one at a time, and every prompt is evaluated whole: llama.cpp's evaluation of a prompt
whose start it kept from the last one differs from a fresh one in the last digits, enough to change a sampled id, and
the same prompt with the same seed must sample the same ids whatever ran before.

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
import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tito_audit.errors import BadInputError
from tito_audit.gateway.errors import EngineError, EngineProcessEnded, EngineProcessError, EngineProcessTimeout
from tito_audit.gateway.llamacpp_process import EngineProcess
from tito_audit.gateway.sampling_engines import EngineOutput, EngineRequest
from tito_audit.model.tokens import TokenCodec

PREFIX = "llamacpp:"
INSTALL = "make llamacpp (llama-cpp-python built from source for AVX2: about 5 minutes the first time)"
CONTEXT = 8192
"""Tokens of context the engine loads (at most the model's own): a KV cache of a few hundred MiB for small models."""
TIMEOUT = 300.0
"""Seconds the engine's process may take to answer one request (load the model, evaluate a prompt, sample an id)."""
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
    """A GGUF model in a process of its own (see the module docstring); ``codec`` is the served model's tokenizer,
    ``timeout`` bounds each wait for the process (``--engine-timeout``)."""

    def __init__(
        self,
        path: str | Path,
        codec: TokenCodec,
        *,
        seed: int = 0,
        n_ctx: int = CONTEXT,
        threads: int | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        if importlib.util.find_spec("llama_cpp") is None:  # found, not imported: the library loads in the process
            raise BadInputError(f"--engine llamacpp needs llama-cpp-python: {INSTALL}")
        path = Path(path)
        if not path.is_file():
            raise BadInputError(f"--engine llamacpp:{path}: no such GGUF file")
        self.path = path
        self.seed = seed
        self.timeout = timeout
        self._codec = codec
        self._lock = threading.Lock()
        self._load = {"op": "load", "path": str(path), "n_ctx": n_ctx, "threads": threads or os.cpu_count() or 1}
        self._load["seed"] = seed
        self._process: EngineProcess | None = None
        try:
            loaded = self._start()
            self.n_ctx = min(int(loaded["n_ctx"]), int(loaded["n_ctx_train"]))
            self.n_vocab = int(loaded["n_vocab"])
            check_vocabulary(self.n_vocab, self._tokenize, codec, path)
            self._first_token()
        except (EngineProcessEnded, EngineProcessTimeout) as exc:
            self._stop()
            why = f"--engine llamacpp:{path}: {exc} while it started; the engine cannot run here"
            raise BadInputError(why) from None
        except EngineProcessError as exc:
            self._stop()
            raise BadInputError(f"--engine llamacpp:{path}: llama.cpp cannot load it ({exc})") from None
        except BaseException:
            self._stop()
            raise
        self.name = f"llama.cpp ({path.name}, {self.n_ctx} tokens of context)"

    def _start(self) -> dict[str, Any]:
        """A new process with the model loaded: what it loaded."""
        self._process = EngineProcess(self.timeout)
        return self._process.ask(self._load)

    def _stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None

    def _tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        assert self._process is not None
        return [list(ids) for ids in self._process.ask({"op": "tokenize", "texts": list(texts)})["ids"]]

    def _first_token(self) -> None:
        """Sample one id (greedy, from the first sample text): where the library cannot run on this CPU, it dies
        here, at start, not on a client's first turn."""
        assert self._process is not None
        prompt = self._codec.encode(SAMPLE_TEXTS[0])
        self._process.ask({"op": "begin", "prompt": prompt, "seed": self.seed, "knobs": {"temp": 0.0}, "top": 0})
        self._process.ask({"op": "next"})
        self._process.ask({"op": "end"})

    @property
    def pid(self) -> int | None:
        """The engine process's id (None between a process that ended and the turn that starts the next)."""
        process = self._process
        return process.pid if process is not None and process.running else None

    @property
    def busy(self) -> bool:
        """Whether a turn is being sampled."""
        return self._lock.locked()

    async def close(self) -> None:
        await asyncio.to_thread(self._stop)

    async def generate(self, request: EngineRequest) -> EngineOutput:
        return await asyncio.to_thread(self.sample, request)

    def sample(self, request: EngineRequest) -> EngineOutput:
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
        with self._lock:
            try:
                return self._sample(request, prompt, limit)
            except EngineProcessEnded as exc:
                self._stop()
                raise EngineError(
                    502,
                    "engine_crashed",
                    f"{exc}, sampling this turn; the turn was not answered (the next turn starts the engine again)",
                ) from None
            except EngineProcessTimeout as exc:
                self._stop()
                why = f"{exc} (it was stopped; the next turn starts it again)"
                raise EngineError(504, "engine_timeout", why) from None
            except EngineProcessError as exc:
                raise EngineError(502, "engine_error", f"the llama.cpp engine failed: {exc}") from None

    def _sample(self, request: EngineRequest, prompt: list[int], limit: int) -> EngineOutput:
        if self._process is None or not self._process.running:
            self._stop()
            self._start()
        process = self._process
        assert process is not None
        stops = set(request.stop_ids)
        texts = _stop_texts(request.sampling.get("stop"))
        ids: list[int] = []
        values: list[float | None] = []
        top: list[list[tuple[int, float]]] = []
        finish = "length"
        begin = {"op": "begin", "prompt": prompt, "seed": self._seed_for(request), "knobs": _knobs(request.sampling)}
        process.ask(begin | {"top": request.top_logprobs})
        while len(ids) < limit:
            step = process.ask({"op": "next"})
            token = int(step["id"])
            ids.append(token)
            values.append(float(step["logprob"]))
            if request.top_logprobs:
                top.append([(int(i), float(v)) for i, v in step["top"]])
            if token in stops or (texts and _ends_a_stop(self._codec, ids, texts)):
                finish = "stop"
                break
        process.ask({"op": "end"})
        return EngineOutput(ids, finish, None, values, top if request.top_logprobs else None)

    def _seed_for(self, request: EngineRequest) -> int:
        given = request.sampling.get("seed")
        if given is not None:
            return int(given) & 0x7FFFFFFF
        key = f"{self.seed}:{request.session_id}:{request.turn}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


def check_vocabulary(
    size: int, tokenize: Callable[[Sequence[str]], list[list[int]]], codec: TokenCodec, path: Path
) -> None:
    """Refuse (one line) a GGUF whose ids are not the served model's: the sample texts and the model's special
    tokens must tokenize to the same ids in both (``tokenize``: the GGUF's, special tokens read as such, no BOS).
    Special tokens past the GGUF's ``size`` ids (Gemma 3 4B's image tokens, which the text-only 270M lacks) are left
    out: the model never samples them, and a prompt holding one is refused at its turn."""
    specials = " ".join(sorted(text for text, i in codec.control_ids_by_text.items() if i < size)[:64])
    texts = (*SAMPLE_TEXTS, specials)
    for text, theirs in zip(texts, tokenize(texts), strict=True):
        ours = codec.encode(text)
        if ours != theirs:
            where = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
            where = min(len(ours), len(theirs)) if where is None else where
            raise BadInputError(
                f"--engine llamacpp:{path}: the GGUF's vocabulary is not the model's tokenizer: {text[:40]!r} is "
                f"{theirs[where : where + 3]} at token {where} in the GGUF and {ours[where : where + 3]} in the "
                "tokenizer; serve the model this GGUF was made from"
            )


def make_llamacpp(engine: str, codec: TokenCodec, seed: int, timeout: float = TIMEOUT) -> LlamaCppEngine:
    """The engine ``--engine llamacpp:PATH`` names (``timeout``: ``--engine-timeout``)."""
    return LlamaCppEngine(engine[len(PREFIX) :], codec, seed=seed, timeout=timeout)


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


def _stop_texts(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(s for s in stop if isinstance(s, str) and s)


def _ends_a_stop(codec: TokenCodec, ids: list[int], texts: tuple[str, ...]) -> bool:
    """Whether the completion's text now holds a stop string (its last tokens decoded: enough for any of them)."""
    window = max(len(t) for t in texts) + 8
    return any(text in codec.decode(ids[-window:]) for text in texts)
