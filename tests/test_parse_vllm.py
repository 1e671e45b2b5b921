"""vLLM's parsers, run for real in their worker process (``make vllm``): the hand-over vLLM's server makes, what its
parsers make of the layouts where they part from SGLang's, harmony for gpt-oss, the documented pairs, and a worker
that is restarted when it dies while tito-audit's own process never imports torch.

Skipped, naming ``make vllm``, where vLLM is not installed; on CI (``CI=true``, which installs it) they fail instead,
so that they always run there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tito_audit.errors import BadInputError
from tito_audit.model.load_by_id import load_by_id
from tito_audit.model.registry import _data, registry_parsers
from tito_audit.parse import vllm
from tito_audit.parse.choice import (
    check_parser_value,
    choose_parser,
    engine_choices,
    needs_tokenizer_prefix,
    refused_prefix,
)
from tito_audit.parse.engines import engine_named
from tito_audit.parse.handover import Sampled, hand_over
from tito_audit.parse.parser import ParseInput, ParserNeedsTokenizer, ParserRefused, ParserUnavailable
from tito_audit.parse.vllm_messages import ErrorKind, Op
from tito_audit.parse.vllm_process import WorkerError

if not vllm.available() and os.environ.get("CI") == "true":
    raise RuntimeError(f"vLLM is not installed on CI, so its tests cannot run; install it with: {vllm.INSTALL}")
pytestmark = [
    requires_shared,
    pytest.mark.skipif(not vllm.available(), reason=f"vLLM's parsers are not installed ({vllm.INSTALL})"),
]

QWEN25 = SHARED_TOKENIZERS / "Qwen--Qwen2.5-7B-Instruct"
QWEN3 = SHARED_TOKENIZERS / "Qwen--Qwen3-4B"
GPT_OSS = SHARED_TOKENIZERS / "openai--gpt-oss-20b"
LLAMA = SHARED_TOKENIZERS / "meta-llama--Llama-3.1-8B-Instruct"
SHARED_TEMPLATES = SHARED_TOKENIZERS.parent / "templates"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ls",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n</tool_call>'


@pytest.fixture(scope="module")
def hermes() -> vllm.VLLMParser:
    return vllm.VLLMParser("hermes", None, QWEN25)


def parsed(parser: vllm.VLLMParser, text: str, tools: list[dict] | None = TOOLS, **more) -> dict:
    return parser.parse(ParseInput(text=text, tools=tools, call_id_seed="seed", **more))


# -- what vLLM's hermes parser does where SGLang's qwen25 does otherwise (the measured layouts) -------------
def test_content_before_a_call_keeps_its_trailing_newline(hermes):
    message = parsed(hermes, "Let me look.\n" + CALL)
    assert message["content"] == "Let me look.\n"
    assert message["tool_calls"][0]["function"] == {"name": "ls", "arguments": {"path": "."}}


def test_a_call_to_an_undeclared_tool_is_kept(hermes):
    message = parsed(hermes, '<tool_call>\n{"name": "rm", "arguments": {"path": "/"}}\n</tool_call>')
    assert [call["function"]["name"] for call in message["tool_calls"]] == ["rm"]


def test_a_compact_call_and_a_call_left_open_with_whole_json_are_parsed(hermes):
    compact = parsed(hermes, '<tool_call>{"name": "ls", "arguments": {"path": "."}}</tool_call>')
    assert compact["tool_calls"][0]["function"]["arguments"] == {"path": "."}
    unclosed = parsed(hermes, '<tool_call>\n{"name": "ls", "arguments": {"path": "."}}')
    assert unclosed["tool_calls"][0]["function"]["name"] == "ls"


def test_truncated_json_leaves_the_whole_text_as_content_and_a_bad_call_drops_the_good_one(hermes):
    text = 'Let me look.\n<tool_call>\n{"name": "ls", "argu'
    truncated = parsed(hermes, text)
    assert truncated == {"role": "assistant", "content": text}
    both = parsed(hermes, CALL + '\n<tool_call>\n{"name": "ls", "arguments": {"path": }\n</tool_call>')
    assert "tool_calls" not in both


def test_without_declared_tools_no_call_is_parsed(hermes):
    assert parsed(hermes, CALL, tools=None) == {"role": "assistant", "content": CALL}


# -- qwen3's reasoning parser reads the template's settings ---------------------------------------------------------
def test_qwen3_reasoning_without_tags_follows_enable_thinking():
    parser = vllm.VLLMParser(None, "qwen3", QWEN3)
    thinking = parsed(parser, "Just an answer.", tools=None)
    assert thinking == {"role": "assistant", "content": "", "reasoning_content": "Just an answer."}
    plain = parsed(parser, "Just an answer.", tools=None, template_kwargs={"enable_thinking": False})
    assert plain == {"role": "assistant", "content": "Just an answer."}


# -- the hand-over: vLLM's detokenizer with the request's settings -------------------------------------------------
def _sampled(tokenizer_dir, text: str, stop: str | None, tools=TOOLS) -> Sampled:
    from tito_audit.model.load_by_id import load_by_id

    loaded = load_by_id(tokenizer_dir.name.replace("--", "/", 1), mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    ids = loaded.tokenizer.encode(text, add_special_tokens=False)
    prompt_ids = loaded.tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    return Sampled(text=text, ids=tuple(ids), stop=stop, tools=tools, prompt_ids=tuple(prompt_ids))


def test_the_stop_token_is_left_out_of_the_text(hermes):
    handed = hand_over(hermes, _sampled(QWEN25, "Done.<|im_end|>", "<|im_end|>"))
    assert handed.text == "Done." and handed.ids[-1] == 151645  # the ids keep it


def test_special_tokens_are_skipped_unless_the_parser_turns_that_off():
    """Llama 3.1's ``<|python_tag|>`` is a special token: vLLM's ``llama3_json`` parser does not ask to keep special
    tokens, so the text it gets has none; ``hermes`` turns ``skip_special_tokens`` off when tools are declared."""
    llama = vllm.VLLMParser("llama3_json", None, LLAMA)
    text = '<|python_tag|>{"name": "ls", "parameters": {"path": "."}}<|eom_id|>'
    handed = hand_over(llama, _sampled(LLAMA, text, "<|eom_id|>"))
    assert handed.text == '{"name": "ls", "parameters": {"path": "."}}'
    hermes_llama = vllm.VLLMParser("hermes", None, LLAMA)
    assert hand_over(hermes_llama, _sampled(LLAMA, text, "<|eom_id|>")).text == text[: -len("<|eom_id|>")]
    assert hand_over(hermes_llama, _sampled(LLAMA, text, "<|eom_id|>", tools=None)).text == text[14:-10]


def test_an_engine_based_reasoning_parser_keeps_special_tokens_even_without_tools(hermes):
    text = "Hi<|endoftext|>there<|im_end|>"
    thinking = vllm.VLLMParser(None, "qwen3", QWEN3)
    assert hand_over(thinking, _sampled(QWEN3, text, "<|im_end|>", tools=None)).text == "Hi<|endoftext|>there"
    assert hand_over(hermes, _sampled(QWEN25, text, "<|im_end|>", tools=None)).text == "Hithere"


def test_gpt_oss_goes_through_the_harmony_parser_on_the_ids():
    parser = vllm.VLLMParser("openai", "openai_gptoss", GPT_OSS)
    assert parser.harmony
    text = (
        "<|channel|>analysis<|message|>List it.<|end|><|start|>assistant<|channel|>commentary to=functions.ls "
        '<|constrain|>json<|message|>{"path": "."}<|call|>'
    )
    message = parser.parse(hand_over(parser, _sampled(GPT_OSS, text, "<|call|>")))
    assert message["reasoning_content"] == "List it."
    assert message["tool_calls"][0]["function"] == {"name": "ls", "arguments": {"path": "."}}


# -- call ids: vLLM's form, reproducible ---------------------------------------------------------------------------
def test_call_ids_have_vllms_form_and_follow_the_seed(hermes):
    first = parsed(hermes, CALL)["tool_calls"][0]["id"]
    assert first == parsed(hermes, CALL)["tool_calls"][0]["id"]
    assert first.startswith("chatcmpl-tool-") and len(first) == len("chatcmpl-tool-") + 16
    other = hermes.parse(ParseInput(text=CALL, tools=TOOLS, call_id_seed="another"))["tool_calls"][0]["id"]
    assert other != first


def test_arguments_that_are_not_an_object_render_as_an_empty_object():
    assert vllm.rendered_arguments('{"a": 1}') == {"a": 1}
    assert vllm.rendered_arguments("[1, 2]") == {} and vllm.rendered_arguments("not json") == {}


# -- Cohere's Command parsers (cohere_melody) on a template-only model's stand-in vocabulary --------------------------
@pytest.fixture(scope="module")
def command_r7b() -> vllm.VLLMParser:
    model = load_by_id("CohereForAI/c4ai-command-r7b-12-2024", mirrors=[SHARED_TEMPLATES], allow_hub=False)
    assert model.text_level_only
    pair = registry_parsers("CohereForAI/c4ai-command-r7b-12-2024", engine="vllm")
    try:
        return vllm.VLLMParser(pair.tool, pair.reasoning, model.resolved.path, model.tokenizer)
    except ParserUnavailable as exc:  # vLLM without the cohere_melody package beside it
        pytest.skip(str(exc))


def test_cohere_command_parsers_read_a_plan_and_a_call_on_the_stand_in(command_r7b):
    assert command_r7b.name == "vllm cohere_command3+cohere_command3" + vllm.STANDIN
    written = (
        "<|START_THINKING|>List it first.<|END_THINKING|><|START_ACTION|>[\n"
        '    {"tool_call_id": "0", "tool_name": "ls", "parameters": {"path": "."}}\n]<|END_ACTION|>'
    )
    message = parsed(command_r7b, written)
    assert message["reasoning_content"] == "List it first." and message["content"] == ""
    (call,) = message["tool_calls"]
    assert call["id"] == "0" and call["function"] == {"name": "ls", "arguments": {"path": "."}}


def test_cohere_command_hand_over_keeps_the_format_tags_and_the_answer_loses_its_trailing_spaces(command_r7b):
    model = load_by_id("CohereForAI/c4ai-command-r7b-12-2024", mirrors=[SHARED_TEMPLATES], allow_hub=False)
    text = "<|START_RESPONSE|>Done.   <|END_RESPONSE|><|END_OF_TURN_TOKEN|>"
    ids = tuple(model.tokenizer.encode(text, add_special_tokens=False))
    given = hand_over(command_r7b, Sampled(text=text, ids=ids, stop="<|END_OF_TURN_TOKEN|>", tools=TOOLS))
    assert given.text == "<|START_RESPONSE|>Done.   <|END_RESPONSE|>"
    assert parsed(command_r7b, given.text)["content"] == "Done."


# -- names, the registry, --parser ----------------------------------------------------------------------------------
def test_every_documented_pair_names_parsers_vllm_registers():
    tools, reasonings = set(vllm.tool_parser_names()), set(vllm.reasoning_parser_names())
    assert len(tools) >= 50 and len(reasonings) >= 40
    for entry in _data()["vllm_parsers"]:
        assert entry["tool"] is None or entry["tool"] in tools, entry
        assert entry["reasoning"] is None or entry["reasoning"] in reasonings, entry
        assert entry["source"]


def test_parser_values_name_the_engine():
    choice = choose_parser("vllm", "Qwen/Qwen3-4B", None, QWEN3)
    assert (choice.engine, choice.tool, choice.reasoning) == ("vllm", "hermes", "qwen3")
    assert choice.source == registry_parsers("Qwen/Qwen3-4B", engine="vllm").source
    named = choose_parser("vllm:qwen3_coder,qwen3", "x/y", None, QWEN3)
    assert (named.engine, named.name) == ("vllm", "vllm qwen3_coder+qwen3")
    check_parser_value("vllm:hermes,qwen3")
    with pytest.raises(BadInputError, match=r"--parser: unknown vLLM tool-call parser 'qwen25' \(known: .*hermes"):
        check_parser_value("vllm:qwen25")
    with pytest.raises(BadInputError, match="no vLLM parser pair is recorded for x/y"):
        choose_parser("vllm", "x/y", None, QWEN3)


def test_a_folder_without_a_tokenizer_leaves_vllm_without_a_verdict_saying_so(tmp_path):
    # a template-only model: the audit runs at text level, and vLLM's parsers, which read the tokenizer, cannot run
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}", encoding="utf-8")
    with pytest.raises(ParserNeedsTokenizer, match="this folder has none"):
        vllm.VLLMParser("hermes", None, tmp_path)
    plan = engine_choices("Qwen/Qwen2.5-7B-Instruct", None, tmp_path)
    assert all(choice.engine != "vllm" for choice in plan.choices)
    (note,) = [note for note in plan.notes if note.startswith(needs_tokenizer_prefix(engine_named("vllm")))]
    assert "read the model's tokenizer, which is not here" in note


def test_a_tokenizer_vllm_cannot_load_is_named_without_the_workers_temporary_folder(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ParserRefused, match="vLLM cannot load the model's tokenizer") as refused:
        vllm.VLLMParser("hermes", None, tmp_path)
    assert "tito-audit-vllm-" not in str(refused.value)


def test_a_parser_that_refuses_the_models_tokenizer_leaves_that_engine_without_a_verdict_and_says_why():
    # Llama 3.1's tokenizer has no <think> token, which vLLM's deepseek_r1 reasoning parser looks up when it is built
    with pytest.raises(ParserRefused, match="could not locate think start/end tokens") as refused:
        vllm.VLLMParser(None, "deepseek_r1", LLAMA)
    assert "tito-audit-vllm-" not in str(refused.value)  # the worker's temporary folder is not named
    plan = engine_choices("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", None, LLAMA)
    assert all(choice.engine != "vllm" for choice in plan.choices)
    (note,) = [note for note in plan.notes if note.startswith(refused_prefix(engine_named("vllm")))]
    assert "vllm no tool parser+deepseek_r1) cannot be built for this model" in note
    assert note.endswith("could not locate think start/end tokens in the tokenizer!")


def test_without_vllm_the_parser_names_the_install(tmp_path):
    env = dict(os.environ, TITO_AUDIT_VLLM_PATH=str(tmp_path))
    code = (
        "from tito_audit.parse.choice import check_parser_value\n"
        "from tito_audit.errors import BadInputError\n"
        "try:\n    check_parser_value('vllm')\nexcept BadInputError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == f"--parser: vLLM's parsers are not installed; install them with: {vllm.INSTALL}"


# -- the worker -----------------------------------------------------------------------------------------------------
def test_a_worker_that_died_is_started_again_and_torch_never_enters_this_process(hermes):
    running, generation = vllm.worker()
    os.killpg(running.process.pid, signal.SIGKILL)
    running.process.wait()
    with pytest.raises(ParserUnavailable, match="worker process failed"):
        running.ask({"op": "names"})
    message = parsed(hermes, CALL)  # a new worker; the parser opens its model in it again
    assert message["tool_calls"] and vllm.worker()[1] == generation + 1
    assert "torch" not in sys.modules and "vllm" not in sys.modules


def test_the_worker_answers_every_operation_and_refuses_an_unknown_one_by_kind():
    """Both sides speak :mod:`tito_audit.parse.vllm_messages`: each operation the client may send is one the worker
    dispatches (a request about a model it has not opened is refused as such, not as an unknown operation), and an
    operation it does not know comes back as an internal error, not a dead worker."""
    running, _ = vllm.worker()
    for op in Op:
        if op in (Op.HELLO, Op.NAMES):
            assert "error" not in running.ask({"op": op})
        elif op is not Op.OPEN:
            with pytest.raises(WorkerError, match="not opened") as refused:
                running.ask({"op": op, "model": "never-opened", "tool": None, "reasoning": None})
            assert refused.value.kind is ErrorKind.INTERNAL
    with pytest.raises(WorkerError, match="unknown request 'ping'") as unknown:
        running.ask({"op": "ping"})
    assert unknown.value.kind is ErrorKind.INTERNAL
    assert running.alive


def test_torch_changes_what_transformers_reports(tmp_path):
    """Why the worker is a process of its own: with vLLM's folder on the path, transformers finds torch."""
    code = "import json, transformers.utils as u; print(json.dumps(u.is_torch_available()))"
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    beside = subprocess.run(
        [sys.executable, "-c", code], env=vllm.worker_environment(), capture_output=True, text=True, timeout=120
    )
    assert json.loads(plain.stdout) is False and json.loads(beside.stdout) is True
