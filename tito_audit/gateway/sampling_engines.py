"""The engines a gateway samples from, token ids in and token ids out.

- ``vllm``: the OpenAI completions endpoint (``POST /v1/completions``) with the prompt given as a list of token ids
  and ``return_token_ids`` set, so that each choice carries the ``token_ids`` it sampled;
- ``sglang``: the native ``POST /generate`` with ``input_ids`` and ``sampling_params``, answering ``output_ids`` and
  ``meta_info.finish_reason`` (``{"type": "stop", "matched": ID}`` when a stop token ended it);
- ``fake`` (:mod:`tito_audit.gateway.fake`): built in, no GPU.

Both HTTP engines are told the session's stop ids (``stop_token_ids``) and never to skip special tokens. An engine
that reports a stop on a token id it left out of the returned ids gets that id appended: the model sampled it, and
the session needs it to know the turn was not cut by the length limit.

Every failure is an :class:`~tito_audit.gateway.errors.EngineError` with the HTTP status the client gets (502 for an
engine that is down or answers nonsense, 504 for one that does not answer in time) and one line naming the cause. An
engine is never blamed for a request the gateway did not send: the HTTP engines' connection pool holds as many
connections as the server has sessions (one request under way per session), and a wait for a connection that still
runs out is 503 ``engine_busy``. What an engine answers past ``max_tokens`` is cut there
(:func:`within_max_tokens`): a session never keeps more than it reserved; an answer larger in bytes than
``max_tokens`` ids can take is refused (502).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tito_audit.errors import one_line
from tito_audit.gateway import engine_logprobs
from tito_audit.gateway.errors import EngineError

ENGINE_APIS = ("vllm", "sglang")

PASSED_THROUGH = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "stop",
    "max_tokens",
)
"""The request's sampling parameters handed to the engine (``max_completion_tokens`` becomes ``max_tokens``)."""


UNANSWERED = "without sending a response"
"""What httpx says when the engine closed a kept-alive connection as the request went out on it: the request never
reached the engine (a race every keep-alive server has), so it is sent once more on a fresh connection."""


async def posted(client: Any, url: str, body: dict[str, Any]) -> Any:
    """The engine's streamed response to ``body`` (close it), the request sent once more when the engine closed the
    kept-alive connection it went out on without answering (:data:`UNANSWERED`)."""
    import httpx

    try:
        return await client.send(client.build_request("POST", url, json=body), stream=True)
    except httpx.RemoteProtocolError as exc:
        if UNANSWERED not in str(exc):
            raise
        return await client.send(client.build_request("POST", url, json=body), stream=True)


@dataclass
class EngineRequest:
    """One generation: the prompt ids and what the request asked for."""

    prompt_ids: Sequence[int]
    """The prompt (a list, or the session's buffer shared read-only: an engine that sends it makes its list)."""
    sampling: dict[str, Any]
    stop_ids: list[int]
    model: str
    # what only the fake engine reads: the conversation the prompt was rendered from
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] | None = None
    tool_choice: Any = "auto"
    session_id: str = ""
    turn: int = 0
    top_logprobs: int = 0
    """Alternatives asked per sampled token (the sampled ids' own log-probabilities are always asked)."""


@dataclass
class EngineOutput:
    ids: list[int]
    finish_reason: str
    """``stop`` or ``length`` as the engine said."""
    message: dict | None = None
    """The message the fake engine rendered its turn from (the ``template`` parser's answer); None for real ones."""
    logprobs: list[float | None] | None = None
    """The engine's log-probability of each id (None where it gave none); None when it gave none at all."""
    top_logprobs: list[list[tuple[int, float]]] | None = None
    """Per id, the alternatives ``(id, logprob)`` the engine gave (asked with ``top_logprobs``)."""


class SamplingEngine(Protocol):
    """What the gateway samples from, token ids in and token ids out: :class:`HttpEngine` (vLLM, SGLang, the stand-in
    of :mod:`.standin`), the built-in fake (:mod:`.fake`) or llama.cpp (:mod:`.llamacpp`). The fake also has
    ``stream(request)``, its pieces as they are sampled (:mod:`.engine_stream` streams the others its own way)."""

    name: str

    async def generate(self, request: EngineRequest) -> EngineOutput: ...

    async def close(self) -> None: ...


ANSWER_BYTES = 1 << 20
"""What an engine's whole answer may take besides its ids (:func:`answer_limit`)."""
ANSWER_BYTES_PER_TOKEN = 1024
"""What one sampled id may take in an engine's answer: the id, its text, its log-probability (more per alternative
asked: :data:`ANSWER_BYTES_PER_ALTERNATIVE`)."""
ANSWER_BYTES_PER_ALTERNATIVE = 64


def answer_limit(max_tokens: int, top_logprobs: int) -> int:
    """The most bytes an engine's answer of ``max_tokens`` ids may take; a larger one is refused unread."""
    per_token = ANSWER_BYTES_PER_TOKEN + ANSWER_BYTES_PER_ALTERNATIVE * top_logprobs
    return ANSWER_BYTES + per_token * max_tokens


def busy(connections: int) -> EngineError:
    """A request that found no free connection to the engine: never sent, so not the engine's fault."""
    return EngineError(
        503,
        "engine_busy",
        f"all {connections} connections to the engine are in use (one per session: --max-sessions); the request "
        "was not sent, retry later",
    )


class HttpEngine:
    """An engine behind HTTP (vLLM or SGLang), called with httpx under one timeout per request, through a pool of
    ``connections`` (the server's most sessions: each has at most one request under way)."""

    def __init__(self, url: str, api: str, timeout: float, connections: int = 1024) -> None:
        import httpx

        if api not in ENGINE_APIS:
            raise ValueError(f"--engine-api must be one of {', '.join(ENGINE_APIS)}, not {api!r}")
        self.url = url.rstrip("/")
        self.api = api
        self.name = f"{api} at {self.url}"
        self.timeout = timeout
        self.connections = connections
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout), limits=limits, trust_env=False)

    @property
    def client(self) -> Any:
        """The httpx client (streamed requests: :mod:`tito_audit.gateway.engine_stream`)."""
        return self._client

    async def close(self) -> None:
        await self._client.aclose()

    async def generate(self, request: EngineRequest) -> EngineOutput:
        import httpx

        path, body = (vllm_body if self.api == "vllm" else sglang_body)(request)
        limit = answer_limit(int(request.sampling.get("max_tokens") or 0), request.top_logprobs)
        try:
            response = await posted(self._client, self.url + path, body)
            try:
                status, raw = response.status_code, await _read_at_most(response, limit)
            finally:
                await response.aclose()
        except httpx.PoolTimeout:
            raise busy(self.connections) from None
        except httpx.TimeoutException:
            raise EngineError(504, "engine_timeout", f"the engine did not answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise EngineError(502, "engine_unreachable", f"the engine cannot be reached ({one_line(exc)})") from None
        if status >= 400:
            text = (raw or b"")[:400].decode("utf-8", "replace")[:200].strip()
            raise EngineError(502, "engine_error", f"the engine answered HTTP {status}: {text or '(empty)'}")
        if raw is None:
            raise EngineError(
                502,
                "engine_bad_response",
                f"the engine's answer is larger than {limit} bytes, more than {request.sampling.get('max_tokens')} "
                "ids (max_tokens) can take",
            )
        try:
            data = json.loads(raw)
        except ValueError:
            raise EngineError(502, "engine_bad_response", "the engine's answer is not JSON") from None
        except RecursionError:
            raise EngineError(
                502, "engine_bad_response", "the engine's answer is JSON nested too deeply to read"
            ) from None
        reader = read_vllm if self.api == "vllm" else read_sglang
        try:
            output = reader(data)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise EngineError(
                502, "engine_bad_response", f"the engine's answer has no token ids where {self.api} puts them ({exc})"
            ) from None
        try:
            return with_matched_stop(output, request.stop_ids)
        except ValueError as exc:
            raise EngineError(502, "engine_bad_response", f"the engine's logprobs do not fit its ids ({exc})") from None


async def _read_at_most(response: Any, limit: int) -> bytes | None:
    """The response's body, or None once it passes ``limit`` bytes (the rest is not read: the connection closes)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def within_max_tokens(output: EngineOutput, max_tokens: int) -> EngineOutput:
    """``output`` cut at ``max_tokens`` ids (finish ``length``, log-probabilities cut with them): an engine that
    sampled past what it was asked is not followed past it."""
    if len(output.ids) <= max_tokens:
        return output
    return EngineOutput(
        output.ids[:max_tokens],
        "length",
        None,  # the fake engine's message was of the whole turn
        output.logprobs[:max_tokens] if output.logprobs is not None else None,
        output.top_logprobs[:max_tokens] if output.top_logprobs is not None else None,
    )


def vllm_body(request: EngineRequest) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {
        "model": request.model,
        "prompt": list(request.prompt_ids),
        "return_token_ids": True,
        "skip_special_tokens": False,
        "stop_token_ids": request.stop_ids,
        "logprobs": request.top_logprobs,
        "return_tokens_as_token_ids": True,
        **request.sampling,
    }
    return "/v1/completions", body


def sglang_body(request: EngineRequest) -> tuple[str, dict[str, Any]]:
    sampling = dict(request.sampling)
    if "max_tokens" in sampling:
        sampling["max_new_tokens"] = sampling.pop("max_tokens")
    seed = sampling.pop("seed", None)
    sampling.update(stop_token_ids=request.stop_ids, skip_special_tokens=False)
    body: dict[str, Any] = {"input_ids": list(request.prompt_ids), "sampling_params": sampling}
    body.update(return_logprob=True, top_logprobs_num=request.top_logprobs, logprob_start_len=-1)
    if seed is not None:
        body["sampling_params"]["sampling_seed"] = seed
    return "/generate", body


@dataclass
class _Read:
    ids: list[int]
    finish_reason: str
    matched: Any = None
    logprobs: engine_logprobs.EngineLogprobs | None = None


def read_vllm(data: dict[str, Any]) -> _Read:
    choice = data["choices"][0]
    ids = choice["token_ids"]
    if not isinstance(ids, list):
        raise ValueError("choices[0].token_ids is not a list")
    finish = str(choice.get("finish_reason") or "stop")
    return _Read(ids, finish, choice.get("stop_reason"), engine_logprobs.read_vllm(choice))


def read_sglang(data: Any) -> _Read:
    if isinstance(data, list):
        data = data[0]
    ids = data["output_ids"]
    if not isinstance(ids, list):
        raise ValueError("output_ids is not a list")
    meta = data.get("meta_info") or {}
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type", "stop") if isinstance(finish, dict) else str(finish)
    matched = finish.get("matched") if isinstance(finish, dict) else None
    return _Read(ids, "length" if kind == "length" else "stop", matched, engine_logprobs.read_sglang(meta))


def with_matched_stop(read: _Read, stop_ids: list[int]) -> EngineOutput:
    ids = list(read.ids)
    matched = read.matched
    left_out = type(matched) is int and matched in stop_ids and (not ids or ids[-1] != matched)
    appended = read.finish_reason == "stop" and left_out
    if appended:
        ids.append(matched)
    values, top = engine_logprobs.aligned(ids, read.logprobs, appended)
    return EngineOutput(ids, "length" if read.finish_reason == "length" else "stop", None, values, top)


def make_engine(engine: str, api: str, timeout: float, ready: Any = None, connections: int = 1024) -> Any:
    """The engine ``--engine`` names: ``fake`` or ``llamacpp:PATH`` (given ``ready``: they need the model) or an
    ``http(s)://`` URL (with a pool of ``connections``)."""
    if engine == "fake" or engine.startswith("llamacpp:"):
        return ready
    if not engine.startswith(("http://", "https://")):
        raise ValueError(f"--engine must be an http(s):// URL, llamacpp:PATH, standin[:SEED] or 'fake', not {engine!r}")
    return HttpEngine(engine, api, timeout, connections)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
