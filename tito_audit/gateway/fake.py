"""``--engine fake``: an engine with no GPU that samples each assistant turn from the audit's own generated turns.

For turn ``t`` of session ``s`` it draws, seeded by ``(seed, s, t)``, an assistant turn of a generated conversation
(:func:`tito_audit.conversations.generate.generate_conversation`: its content and reasoning, stress texts
included), with tool calls re-aimed at the request's tools (arguments drawn from each tool's JSON Schema by
:mod:`tito_audit.conversations.schema_draw`, as the audit draws them; a schema it cannot draw from is the request's
fault: 400 naming the tool and the keyword) or a final answer, as ``tool_choice`` allows. The completion is what the
audit's simulated rollout takes for a turn (:mod:`tito_audit.audit.checks.trace`): the template's rendering of the
conversation with that turn, after its generation prompt, encoded, cut right after the first stop token; about half
the turns are then given a non-canonical split (a token replaced by the pieces it is made of), as a sampling engine
can produce.

The message the turn was rendered from comes back with the ids: the ``template`` parser (the perfect inverse) answers
with it, which is sound only for this engine. So do log-probabilities (:func:`drawn_logprobs`): deterministic per
session, turn and id, drawn apart from the turn so that asking for them changes no sampled id.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from tito_audit.conversations.generate import generate_conversation
from tito_audit.conversations.schema_draw import SchemaDrawError, draw_arguments
from tito_audit.gateway.errors import EngineError
from tito_audit.gateway.sampling_engines import EngineOutput, EngineRequest
from tito_audit.model.render import RenderError
from tito_audit.session.machinery import Machinery

FINAL_AFTER_CALLS = 3
"""Tool-call turns after which a final answer becomes likely (a conversation ends)."""


class FakeEngine:
    """Seeded sampling from generated turns (see the module docstring); thread safe (one render at a time per
    model, under the machinery's lock)."""

    name = "fake"

    def __init__(self, machinery: Machinery, *, seed: int = 0, clock: datetime, noncanonical: float = 0.5) -> None:
        self.machinery = machinery
        self.seed = seed
        self.clock = clock
        self.noncanonical = noncanonical
        self.piece_ids = 4
        """Ids per piece of a streamed turn."""
        self.piece_seconds = 0.0
        """The wait between two pieces of a streamed turn (tests that disconnect mid-stream set it)."""

    async def close(self) -> None:
        return None

    async def generate(self, request: EngineRequest) -> EngineOutput:
        return await asyncio.to_thread(self.sample, request)

    async def stream(self, request: EngineRequest) -> AsyncIterator[Any]:
        """The turn :meth:`sample` gives, in pieces of :attr:`piece_ids` ids, :attr:`piece_seconds` apart."""
        from tito_audit.gateway.engine_stream import EnginePiece

        output = await asyncio.to_thread(self.sample, request)
        ids = output.ids
        for start in range(0, max(len(ids), 1), self.piece_ids):
            if start:
                await asyncio.sleep(self.piece_seconds)
            last = start + self.piece_ids >= len(ids)
            yield EnginePiece(ids[start : start + self.piece_ids], output if last else None)

    def sample(self, request: EngineRequest) -> EngineOutput:
        rng = random.Random(f"fake:{self.seed}:{request.session_id}:{request.turn}")
        message = self.message(rng, request)
        text = self._turn_text(request, message)
        if message.get("reasoning_content") and message["reasoning_content"] not in text:
            message.pop("reasoning_content")  # the template writes no reasoning here: the model sampled none
            text = self._turn_text(request, message)
        codec, machinery = self.machinery.codec, self.machinery
        with machinery.lock:  # the codec's caches are shared by every session of the model
            ids = codec.encode(text)
        stops = machinery.stop_ids
        cut = next((i + 1 for i, token in enumerate(ids) if token in stops), None)
        limit = request.sampling.get("max_tokens")
        finish = "stop"
        if cut is not None:
            ids = ids[:cut]
        if limit is not None and len(ids) > limit:
            ids, finish = ids[:limit], "length"
        elif cut is None:
            finish = "length"
        with machinery.lock:
            if rng.random() < self.noncanonical:
                ids = codec.noncanonical(ids, rng) or ids
            if finish == "length":  # a cut turn: its message is its text (the perfect inverse of a cut turn)
                message = {"role": "assistant", "content": codec.decode(ids)}
        key = f"{self.seed}:{request.session_id}:{request.turn}"
        values, top = drawn_logprobs(key, ids, stops, request.top_logprobs, codec.id_limit)
        return EngineOutput(ids, finish, message, values, top)

    def message(self, rng: random.Random, request: EngineRequest) -> dict[str, Any]:
        """The assistant turn: a generated one, its calls aimed at the request's tools."""
        conversation = generate_conversation(rng.randrange(10_000), self.seed)
        turns = [m for m in conversation.messages if m.get("role") == "assistant"]
        tools = _allowed_tools(request.tools, request.tool_choice)
        calls_so_far = sum(len(m.get("tool_calls") or []) for m in request.messages if m.get("role") == "assistant")
        chance = 0.8 if calls_so_far < FINAL_AFTER_CALLS else 0.3
        wants_call = bool(tools) and (request.tool_choice not in ("auto", None) or rng.random() < chance)
        with_calls = [m for m in turns if m.get("tool_calls")]
        finals = [m for m in turns if not m.get("tool_calls")]
        source = rng.choice(with_calls if wants_call and with_calls else finals or turns)
        message: dict[str, Any] = {"role": "assistant", "content": source.get("content") or ""}
        if source.get("reasoning_content"):
            message["reasoning_content"] = source["reasoning_content"]
        if wants_call:
            count = 2 if len(tools) > 1 and rng.random() < 0.25 else 1
            message["tool_calls"] = [self._call(rng, rng.choice(tools)) for _ in range(count)]
        elif not message["content"]:
            message["content"] = "Done."
        return message

    def _call(self, rng: random.Random, tool: dict) -> dict[str, Any]:
        function = tool["function"]
        try:
            arguments = draw_arguments(tool, rng)
        except SchemaDrawError as exc:  # the request's tool schema, not the engine, is at fault
            raise EngineError(400, "tool_schema", f"tools: {exc}") from None
        call_id = "call_" + "".join(rng.choice("0123456789abcdef") for _ in range(24))
        return {"id": call_id, "type": "function", "function": {"name": function["name"], "arguments": arguments}}

    def _turn_text(self, request: EngineRequest, message: dict) -> str:
        machinery = self.machinery
        messages = [*request.messages, message]
        count = len(request.messages)
        needed = [(count, True), (count + 1, False)]
        try:
            with machinery.lock, machinery.rendering(self.clock):
                renders = machinery.renderer.prefixes(messages, request.tools, needed)
        except RenderError as exc:
            raise EngineError(502, "fake_engine_render", f"the fake engine could not render its turn ({exc})") from None
        prompt, full = renders[(count, True)].text, renders[(count + 1, False)].text
        if not full.startswith(prompt):
            raise EngineError(
                502,
                "fake_engine_render",
                "the fake engine cannot sample this turn: the template does not write it after its generation prompt",
            )
        return full[len(prompt) :]


def drawn_logprobs(
    key: str, ids: list[int], stops: frozenset[int], top: int, id_limit: int
) -> tuple[list[float | None], list[list[tuple[int, float]]] | None]:
    """Log-probabilities a model could have given ``ids``, drawn from ``key``: a stop token near 0, other ids about
    -0.7 on average (at least -20); with ``top``, the ``top`` most likely of the sampled id and ids drawn beside it
    (from a generator of their own: asking for them changes no log-probability), whose probabilities share what the
    sampled id leaves (halving), so that they sum to at most 1."""
    rng, others_rng = random.Random(f"fake-logprobs:{key}"), random.Random(f"fake-top-logprobs:{key}")
    values: list[float | None] = []
    alternatives: list[list[tuple[int, float]]] = []
    for token in ids:
        value = -rng.uniform(0.0, 0.05) if token in stops else max(-rng.expovariate(1.5), -20.0)
        values.append(round(value, 6))
        if top:
            rest = max(1.0 - math.exp(value), 1e-12)
            others = {others_rng.randrange(id_limit) for _ in range(top)} - {token}
            pairs = [(token, round(value, 6))]  # the value just kept, as a float
            pairs += [(other, round(math.log(rest * 0.5 ** (n + 1)), 6)) for n, other in enumerate(sorted(others))]
            alternatives.append(sorted(pairs, key=lambda pair: -pair[1])[:top])
    return values, alternatives if top else None


def _allowed_tools(tools: list[dict] | None, choice: Any) -> list[dict]:
    if not tools or choice == "none":
        return []
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        return [t for t in tools if t["function"]["name"] == name] or list(tools)
    return list(tools)
