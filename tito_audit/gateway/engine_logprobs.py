"""How engines answer log-probabilities, read and put beside the ids they sampled.

Every turn asks the engine for the log-probability of each sampled id (a trainer's importance-sampling correction
needs them whether or not the agent asked); the alternatives (``top_logprobs``) only when the request asks.

- vLLM (``/v1/completions``, 0.10.2 and later: the releases with ``return_token_ids``): ``logprobs: K`` (the number of
  alternatives, 0 for the sampled id alone) and ``return_tokens_as_token_ids: true``, so that ``choices[0].logprobs``
  names each token ``token_id:N``: ``tokens``, ``token_logprobs`` (one per sampled id) and ``top_logprobs`` (per
  position, ``{"token_id:N": logprob}``: the sampled id and the ``K`` most likely). A server that answers tokens as
  text is read by position, without alternatives.
- SGLang (``/generate``): ``return_logprob: true``, ``top_logprobs_num: K`` and ``logprob_start_len: -1`` (no prompt
  log-probabilities); ``meta_info.output_token_logprobs`` is ``[[logprob, id, text], ...]`` and
  ``meta_info.output_top_logprobs`` one such list per position (``text`` is null unless asked).

An engine's log-probabilities must name the ids it sampled, one per id (the stop token an engine leaves out of its
ids and the gateway puts back may have none): anything else raises ValueError, the engine's fault (502). Both
engines write an impossible log-probability as a large negative number (vLLM -9999.0); so does this reader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Top = list[tuple[int, float]]


@dataclass
class EngineLogprobs:
    """What an engine said: per returned id, the id it names (None when it names none) and its log-probability, and
    the alternatives per position when asked."""

    entries: list[tuple[int | None, float | None]]
    top: list[Top] | None = None


def read_vllm(choice: dict[str, Any]) -> EngineLogprobs | None:
    """``choices[0].logprobs`` of a vLLM completion (None when it has none)."""
    block = choice.get("logprobs")
    if block is None:
        return None
    values = block["token_logprobs"]
    tokens = block.get("tokens") or [None] * len(values)
    if not isinstance(values, list) or not isinstance(tokens, list) or len(tokens) != len(values):
        raise ValueError("logprobs.token_logprobs and logprobs.tokens are not lists of one length")
    entries = [(_vllm_id(token), _number(value)) for token, value in zip(tokens, values, strict=True)]
    top = None
    tops = block.get("top_logprobs")
    if isinstance(tops, list) and all(isinstance(t, dict) or t is None for t in tops):
        pairs = [[(_vllm_id(k), _number(v)) for k, v in (t or {}).items()] for t in tops]
        if all(i is not None and v is not None for row in pairs for i, v in row):
            top = [[(int(i), float(v)) for i, v in row] for row in pairs]  # type: ignore[arg-type]
    return EngineLogprobs(entries, top)


def read_sglang(meta: dict[str, Any]) -> EngineLogprobs | None:
    """``meta_info.output_token_logprobs`` (and ``output_top_logprobs``) of an SGLang answer (None when absent)."""
    rows = meta.get("output_token_logprobs")
    if rows is None:
        return None
    if not isinstance(rows, list):
        raise ValueError("meta_info.output_token_logprobs is not a list")
    entries = [_sglang_entry(row) for row in rows]
    tops = meta.get("output_top_logprobs")
    top = None
    if isinstance(tops, list):
        top = []
        for row in tops:
            pairs = [_sglang_entry(item) for item in (row or [])]
            top.append([(i, v) for i, v in pairs if i is not None and v is not None])
    return EngineLogprobs(entries, top)


def aligned(ids: list[int], read: EngineLogprobs | None, appended: bool) -> tuple[list | None, list[Top] | None]:
    """The engine's log-probabilities, one per id of ``ids`` (the completion as the gateway keeps it; ``appended``:
    its last id is a stop token the gateway put back), and the alternatives; raises ValueError when they name other
    ids or do not fit."""
    if read is None:
        return None, None
    entries, top = list(read.entries), read.top
    if appended and len(entries) == len(ids) - 1:
        entries.append((ids[-1], None))
        top = [*top, []] if top is not None else None
    if len(entries) != len(ids):
        raise ValueError(f"{len(entries)} logprobs for {len(ids)} sampled ids")
    for position, ((named, _), sampled) in enumerate(zip(entries, ids, strict=True)):
        if named is not None and named != sampled:
            raise ValueError(f"logprobs[{position}] is for id {named}, not the sampled id {sampled}")
    if top is not None and len(top) != len(ids):
        top = None
    return [value for _, value in entries], top


def _vllm_id(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith("token_id:") and token[9:].lstrip("-").isdigit():
        return int(token[9:])
    return None


def _sglang_entry(row: Any) -> tuple[int | None, float | None]:
    if not isinstance(row, (list, tuple)) or len(row) < 2 or type(row[1]) is not int:
        raise ValueError("meta_info logprobs are not [logprob, id, text] triples")
    return row[1], _number(row[0])


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or math.isnan(value):
        raise ValueError(f"a logprob is {value!r}, not a number")
    return max(float(value), -9999.0)
