"""The gateway's vLLM engine adapter against vLLM 0.33's own protocol classes (run in vLLM's worker environment):
every field the adapter sends is one vLLM's ``CompletionRequest`` reads, with the meaning the adapter wants (prompt
ids, stop ids, special tokens kept, the sampled ids' log-probabilities); and what vLLM's ``CompletionResponse`` and
stream chunks carry reads back as the sampled ids, the matched stop and the log-probabilities."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tito_audit.gateway import engine_stream
from tito_audit.gateway.sampling_engines import EngineRequest, read_vllm, vllm_body, with_matched_stop
from tito_audit.parse import vllm

if not vllm.available() and os.environ.get("CI") == "true":
    raise RuntimeError(f"vLLM is not installed on CI, so its tests cannot run; install it with: {vllm.INSTALL}")
pytestmark = pytest.mark.skipif(not vllm.available(), reason=f"vLLM is not installed ({vllm.INSTALL})")

IN_VLLM = r"""
import json, sys
from vllm.entrypoints.openai.completion.protocol import (
    CompletionLogProbs, CompletionRequest, CompletionResponse, CompletionResponseChoice, CompletionResponseStreamChoice,
    CompletionStreamResponse,
)
body = json.loads(sys.argv[1])
request = CompletionRequest.model_validate(body)
params = request.to_sampling_params(body["max_tokens"], {})
out = {
    "unread": sorted(request.model_extra or {}),
    "prompt": request.prompt,
    "return_token_ids": request.return_token_ids,
    "skip_special_tokens": params.skip_special_tokens,
    "stop_token_ids": params.stop_token_ids,
    "logprobs": params.logprobs,
    "max_tokens": params.max_tokens,
    "temperature": params.temperature,
    "seed": params.seed,
}
logprobs = CompletionLogProbs(
    tokens=["token_id:5", "token_id:6", "token_id:7"],
    token_logprobs=[-0.5, -0.25, -0.125],
    top_logprobs=[{"token_id:5": -0.5, "token_id:9": -2.0}, {"token_id:6": -0.25}, {"token_id:7": -0.125}],
    text_offset=[0, 1, 2],
)
usage = {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
choice = CompletionResponseChoice(index=0, text="ab", token_ids=[5, 6, 7], finish_reason="stop", stop_reason=7,
                                  logprobs=logprobs)
out["whole"] = json.loads(CompletionResponse(model="m", choices=[choice], usage=usage).model_dump_json())
pieces = [([5, 6], None, None), ([7], "stop", 7)]
out["events"] = [
    json.loads(CompletionStreamResponse(model="m", choices=[CompletionResponseStreamChoice(
        index=0, text="", token_ids=ids, finish_reason=finish, stop_reason=stop)]).model_dump_json())
    for ids, finish, stop in pieces
]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def vllms_view() -> dict:
    request = EngineRequest(
        prompt_ids=[1, 2, 3],
        sampling={"temperature": 0.5, "seed": 7, "max_tokens": 16},
        stop_ids=[7, 8],
        model="m",
        top_logprobs=2,
    )
    path, body = vllm_body(request)
    assert path == "/v1/completions"
    out = subprocess.run(
        [sys.executable, "-c", IN_VLLM, json.dumps(body)],
        env=vllm.worker_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_field_the_adapter_sends_is_one_vllm_reads_as_meant(vllms_view):
    assert vllms_view["unread"] == []
    assert vllms_view["prompt"] == [1, 2, 3] and vllms_view["return_token_ids"] is True
    assert vllms_view["skip_special_tokens"] is False
    assert vllms_view["stop_token_ids"] == [7, 8]
    assert vllms_view["logprobs"] == 2
    assert (vllms_view["max_tokens"], vllms_view["temperature"], vllms_view["seed"]) == (16, 0.5, 7)


def test_vllms_answer_reads_back_as_the_sampled_ids_and_their_logprobs(vllms_view):
    read = read_vllm(vllms_view["whole"])
    output = with_matched_stop(read, [7, 8])
    assert output.ids == [5, 6, 7] and output.finish_reason == "stop"
    assert output.logprobs == [-0.5, -0.25, -0.125]
    assert output.top_logprobs is not None and output.top_logprobs[0] == [(5, -0.5), (9, -2.0)]


def test_vllms_stream_reads_back_piece_by_piece(vllms_view):
    events = engine_stream._VllmEvents()
    pieces = [events.read(event).ids for event in vllms_view["events"]]
    assert pieces == [[5, 6], [7]]
    end = events.ended([7, 8])
    assert end is not None and end.output is not None and end.output.ids == [5, 6, 7]
