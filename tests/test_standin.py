"""The stand-in engine (``serve --engine standin``): it reads the tools a prompt declares from the prompt's text, and
writes completions a model of the family could write after it: the reasoning closer never inside reasoning, no
control token inside what the model means, call ids in the family's form, arguments valid against the declared tool's
schema, one stop token at the end, tools that only read; deterministic by seed; vLLM-shaped and SGLang-shaped through
the gateway's own HTTP engine."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tito_audit.gateway.standin.declared_tools import read_gemma, read_json, read_typescript, read_xml
from tito_audit.gateway.standin.engine import standin_seed
from tito_audit.gateway.standin.tool_use import NEVER, READ_ONLY_COMMANDS, SHELL, arguments_for, callable_tools, kind_of

jsonschema = pytest.importorskip("jsonschema")


def _tool(name: str, parameters: dict, description: str = "") -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


BASH = _tool(
    "Bash",
    {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
        "required": ["command"],
    },
    "Run a shell command.",
)
ARGV = _tool(
    "shell",
    {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"}},
        "required": ["command"],
    },
    "Runs a shell command.",
)
READ = _tool("Read", {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]})
FETCH = _tool("WebFetch", {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]})
WRITE = _tool(
    "Write", {"type": "object", "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}}}
)


# -- reading declarations back (no tokenizer needed) -----------------------------------------------------------------
def test_json_declarations_are_read_and_a_call_in_the_history_is_not():
    text = (
        "<tools>\n" + json.dumps(BASH) + "\n" + repr(READ) + "\n</tools>\n"  # JSON, and Python's repr (SmolLM3)
        'Answer as {"name": <function-name>, "arguments": <args>}\n{"name": "Bash", "parameters": {"command": "ls"}}'
    )
    assert [t["function"]["name"] for t in read_json(text)] == ["Bash", "Read"]
    assert read_json(text)[0]["function"]["parameters"] == BASH["function"]["parameters"]


def test_harmony_typescript_declarations_come_back_as_schemas():
    text = (
        "namespace functions {\n\n// Run a command.\nA second line of description: x,\ntype run = (_: {\n"
        '// the command\ncommand: string,\nmode?: "fast" | "full", // default: fast\nflags?: string[],\n'
        "opts?: {\na: \n   boolean, b?: \n   number},\nnote?: string | null,\n}) => any;\n\n"
        "// No arguments.\ntype ping = () => any;\n\n} // namespace functions"
    )
    run, ping = read_typescript(text)
    assert run["function"]["description"] == "Run a command.\nA second line of description: x,"
    assert run["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "the command"},
            "mode": {"type": "string", "enum": ["fast", "full"]},
            "flags": {"type": "array", "items": {"type": "string"}},
            "opts": {
                "type": "object",
                "properties": {"a": {"type": "boolean"}, "b": {"type": "integer"}},
                "required": ["a"],
            },
            "note": {"type": "string", "nullable": True},
        },
        "required": ["command"],
    }
    assert ping["function"] == {"name": "ping", "description": "No arguments."}


def test_gemma_and_xml_declarations_come_back_as_schemas():
    gemma = (
        '<|tool>declaration:look{description:<|"|>Look.<|"|>,parameters:{properties:{q:{description:<|"|>a, b<|"|>,'
        'type:<|"|>STRING<|"|>},n:{nullable:true,type:<|"|>INTEGER<|"|>}},required:[<|"|>q<|"|>],'
        'type:<|"|>OBJECT<|"|>}}<tool|>'
    )
    assert read_gemma(gemma)[0]["function"]["parameters"] == {
        "properties": {"q": {"description": "a, b", "type": "string"}, "n": {"nullable": True, "type": "integer"}},
        "required": ["q"],
        "type": "object",
    }
    xml = (
        "<tools>\n<function>\n<name>look</name>\n<description>Look.</description>\n<parameters>\n<parameter>\n"
        "<name>mode</name>\n<type>string</type>\n<enum>[`a`, `b`]</enum>\n<nullable>True</nullable>\n</parameter>\n"
        "<required>[`mode`]</required>\n</parameters>\n</function>\n</tools>"
    )
    assert read_xml(xml)[0]["function"]["parameters"] == {
        "type": "object",
        "properties": {"mode": {"type": "string", "enum": ["a", "b"], "nullable": True}},
        "required": ["mode"],
    }


# -- which tools, which arguments ------------------------------------------------------------------------------------
def test_the_stand_in_calls_only_tools_that_read():
    assert [kind_of(t) for t in (BASH, ARGV, READ, FETCH, WRITE)] == [SHELL, SHELL, "reading", NEVER, NEVER]
    assert callable_tools([FETCH, WRITE, READ, BASH]) == [BASH, READ]
    assert callable_tools([FETCH, WRITE]) == []
    for seed in range(40):
        rng = random.Random(seed)
        assert arguments_for(rng, BASH)["command"] in READ_ONLY_COMMANDS
        argv = arguments_for(rng, ARGV)
        assert set(argv) == {"command"} and argv["command"][:2] == ["bash", "-lc"]
        assert argv["command"][2] in READ_ONLY_COMMANDS
        assert arguments_for(rng, READ)["file_path"] in ("README.md", "notes.txt")


def test_the_engine_option_names_the_seed():
    assert standin_seed("standin", 5) == 5
    assert standin_seed("standin:12", 5) == 12
    assert standin_seed("http://127.0.0.1:8000", 5) is None
    with pytest.raises(ValueError, match="standin:SEED needs an integer seed"):
        standin_seed("standin:x", 0)


# -- what a prompt asks in words (no tokenizer needed) ---------------------------------------------------------------
CODEX_COMPACTION = (
    "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will resume "
    "the task.\n\nInclude:\n- Current progress and key decisions made\n- What remains to be done (clear next steps)"
)  # Codex CLI 0.171.0's summary request (its last message), as recorded through the gateway
CODEX_RESTART = (
    "Another language model started to solve this problem and produced a summary of its thinking process. You also "
    "have access to the state of the tools that were used by that language model. Use this to build on the work that "
    "has already been done and avoid duplicating work. Here is the summary produced by the other language model, use "
    "the information in this summary to assist with your own analysis:\n\n"
)  # and the message it restarts from, the summary after it
CLAUDE_COMPACT = (
    " CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n- Do NOT use Read, Bash, Grep, Glob, Edit, Write, or "
    "ANY other tool.\n- Your entire response must be plain text: an <analysis> block followed by a <summary> block."
    "\n\nYour task is to create a detailed summary of the conversation so far, paying close attention to the user's "
    "explicit requests and your previous actions."
)  # Claude Code 2.1.197's /compact (its last message), as recorded
MINI_TEXT_BASED = (
    "You are a helpful assistant that can interact with a computer.\n\nYour response must contain exactly ONE bash "
    "code block with ONE command (or commands connected with && or ||).\n<format_example>\nYour reasoning and "
    "analysis here.\n\n```mswea_bash_command\nyour_command_here\n```\n</format_example>\nPlease solve this "
    "issue: look around.\n6. Submit your changes and finish your work by issuing the following command: `echo "
    "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.\n```mswea_bash_command\nls -la\n```\n```bash\nls\n```"
)  # mini-swe-agent 2.4.6's mini_textbased.yaml, as its templates write it (shortened)


def test_a_prompt_asking_for_a_summary_gets_one_and_a_restart_from_one_goes_on_from_it():
    from tito_audit.gateway.standin.instructions import read_asked, summary_text

    codex = read_asked("", CODEX_COMPACTION, CODEX_COMPACTION, True)
    assert codex.summary and not codex.summary_tags and codex.no_calls
    claude = read_asked("", CLAUDE_COMPACT, CLAUDE_COMPACT, True)
    assert claude.summary and claude.text_only and claude.summary_tags
    restart = CODEX_RESTART + summary_text(4, False)
    after = read_asked("", restart, "instructions " + restart, True)
    assert not after.summary and after.done == 4 and after.done_at > 0  # a summary described is not one asked for
    assert not read_asked("", "Summarize README.md in one line.", "", True).summary  # a task, not the conversation
    assert "<summary>" in summary_text(2, True) and "I ran 2 commands" in summary_text(2, True)


def test_actions_as_text_are_read_from_the_instructions_when_no_tool_is_declared():
    from tito_audit.gateway.standin.instructions import read_asked

    asked = read_asked(MINI_TEXT_BASED, "Please solve this issue", MINI_TEXT_BASED, False)
    assert asked.fence == "mswea_bash_command" and asked.finish == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    assert read_asked(MINI_TEXT_BASED, "", MINI_TEXT_BASED, True).fence is None  # tools declared: calls, not text
    assert read_asked("Answer the user.", "", "", False).fence is None


# -- real templates --------------------------------------------------------------------------------------------------
FAMILIES = {
    "Qwen/Qwen3-4B": "json",
    "Qwen/Qwen2.5-7B-Instruct": "json",
    "Qwen/Qwen3.5-0.8B": "json",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "xml",
    "openai/gpt-oss-20b": "typescript",
    "meta-llama/Llama-3.1-8B-Instruct": "json",
    "google/gemma-4-E2B-it": "gemma",
    "mistralai/Mistral-Nemo-Instruct-2407": "json",
    "HuggingFaceTB/SmolLM3-3B": "json",
    "deepseek-ai/DeepSeek-V3": None,  # its template writes no tools into the prompt: the model sees none
}
_MODELS: dict = {}


def standin(model_id: str, seed: int = 0):
    from tito_audit.gateway.standin.model import StandinModel
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    if model_id not in _MODELS:
        source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
        _MODELS[model_id] = machinery_for(model_id, source, None, ())
    return StandinModel(_MODELS[model_id], seed)


def _identifier():
    return st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).map(lambda s: "p" + s)


_leaf = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer"},
        {"type": "boolean"},
        {"type": "string", "enum": ["low", "high"]},
        {"type": "array", "items": {"type": "string"}},
    ]
)
_property = st.one_of(
    _leaf,
    st.dictionaries(_identifier(), _leaf, min_size=1, max_size=2).map(
        lambda props: {"type": "object", "properties": props, "required": sorted(props)[:1]}
    ),
)
_declared = st.builds(
    lambda name, props, keep: _tool(
        name, {"type": "object", "properties": props, "required": sorted(props)[:keep]}, "Look something up."
    ),
    st.sampled_from(["lookup", "list_items", "get_status", "read_record"]),
    st.dictionaries(_identifier(), _property, min_size=1, max_size=3),
    st.integers(0, 2),
)
_tool_sets = st.lists(_declared, min_size=1, max_size=3, unique_by=lambda t: t["function"]["name"]).flatmap(
    lambda tools: st.sampled_from([tools, [*tools, BASH], [*tools, FETCH]])
)


@requires_shared
@pytest.mark.shared
@pytest.mark.parametrize("model_id", sorted(FAMILIES))
def test_the_stand_in_reads_the_tools_in_the_templates_layout(model_id):
    model = standin(model_id)
    assert (model.reader.name if model.reader else None) == FAMILIES[model_id]


@requires_shared
@pytest.mark.shared
@pytest.mark.parametrize("model_id", sorted(FAMILIES))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tools=_tool_sets, seed=st.integers(0, 2**16))
def test_completions_are_realizable_and_their_calls_valid(model_id, tools, seed):
    from tito_audit.audit.generation import unsampled_texts
    from tito_audit.audit.realization.reasoning_block import variant_reasoning
    from tito_audit.conversations.call_ids import NINE

    model = standin(model_id, seed)
    machinery = model.machinery
    renderer, codec = machinery.renderer, machinery.codec
    closer = model.block.closer.strip() if model.block is not None else None
    with machinery.lock:
        unsampled = unsampled_texts(codec, variant_reasoning(renderer.text_or_none, tools))
    id_pattern = re.compile(r"[A-Za-z0-9]{9}" if model.id_form is NINE else r"call_[A-Za-z0-9]{24}")
    declared = {t["function"]["name"]: t for t in tools}
    messages: list[dict] = [{"role": "system", "content": "You look around."}, {"role": "user", "content": "Look."}]
    for _ in range(4):
        with machinery.lock:
            prompt = renderer.prefixes(messages, tools, [(len(messages), True)])[(len(messages), True)].ids
        turn = model.complete(prompt, 4096, sorted(machinery.stop_ids))
        assert turn.finish_reason == "stop" and turn.ids[-1] in machinery.stop_ids | {model.end_id}
        assert not any(i in machinery.stop_ids for i in turn.ids[:-1])
        message = turn.message
        reasoning = message.get("reasoning_content") or ""
        if closer:
            assert closer not in reasoning and turn.text.count(closer) <= 1
        meant = [reasoning, message.get("content") or ""]
        for call in message.get("tool_calls") or []:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            assert name in declared and kind_of(declared[name]) != NEVER
            assert name in turn.text
            jsonschema.validate(arguments, declared[name]["function"]["parameters"])
            assert id_pattern.fullmatch(call["id"])
            meant.append(json.dumps(arguments, ensure_ascii=False))
        assert not [u for u in unsampled if any(u in text for text in meant)]
        messages.append(message)
        if not message.get("tool_calls"):
            break
        messages += [
            {"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"], "content": "ok"}
            for c in message["tool_calls"]
        ]


@requires_shared
@pytest.mark.shared
def test_the_stand_in_is_deterministic_by_seed_and_rollouts_of_one_prompt_differ():
    def rollouts(seed: int) -> list[list[int]]:
        model = standin("Qwen/Qwen3-4B", seed)
        with model.machinery.lock:
            prompt = model.machinery.renderer.prefixes(
                [{"role": "user", "content": "Look."}], [BASH, READ], [(1, True)]
            )[(1, True)].ids
        return [model.complete(prompt, 512, sorted(model.machinery.stop_ids)).ids for _ in range(6)]

    first = rollouts(1)
    assert rollouts(1) == first
    assert rollouts(2) != first
    assert len({tuple(ids) for ids in first}) > 1


@requires_shared
@pytest.mark.shared
def test_a_family_that_reasons_sometimes_closes_the_block_at_once_and_answers_after_a_few_calls():
    model = standin("Qwen/Qwen3-4B", 0)
    renderer = model.machinery.renderer
    forms, lengths = set(), []
    for rollout in range(12):
        messages: list[dict] = [{"role": "user", "content": f"Look {rollout}."}]
        for turn_number in range(8):
            with model.machinery.lock:
                prompt = renderer.prefixes(messages, [BASH], [(len(messages), True)])[(len(messages), True)].ids
            message = model.complete(prompt, 512, sorted(model.machinery.stop_ids)).message
            forms.add(
                "empty"
                if message.get("reasoning_content") == ""
                else "present"
                if message.get("reasoning_content")
                else "absent"
            )
            messages.append(message)
            if not message.get("tool_calls"):
                lengths.append(turn_number)
                break
            messages += [
                {"role": "tool", "tool_call_id": c["id"], "content": "README.md"} for c in message["tool_calls"]
            ]
    assert {"empty", "present"} <= forms
    assert len(lengths) == 12 and min(lengths) >= 2 and max(lengths) <= 6


@requires_shared
@pytest.mark.shared
@pytest.mark.parametrize(("api", "stream"), [("vllm", False), ("vllm", True), ("sglang", False), ("sglang", True)])
def test_the_gateway_serves_the_stand_in_through_its_http_engine(api, stream):
    """``serve --engine standin`` with each engine shape: the answers are the engine's parser's reading of the
    stand-in's completions, and the session keeps every sampled id in the loss."""
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    standin("Qwen/Qwen2.5-7B-Instruct")
    machinery = _MODELS["Qwen/Qwen2.5-7B-Instruct"]
    gateway = Gateway(
        GatewayConfig("Qwen/Qwen2.5-7B-Instruct", engine="standin:4", engine_api=api, parser="sglang"),
        machinery=machinery,
    )
    assert gateway.engine.name.startswith(f"standin (seed 4, {api}-shaped at http://127.0.0.1:")
    with running(gateway) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        messages: list[dict] = [{"role": "user", "content": "What is in this folder?"}]
        calls = 0
        for _ in range(8):
            reply = client.chat.completions.create(
                model="Qwen/Qwen2.5-7B-Instruct",
                messages=messages,
                tools=[BASH],
                stream=stream,
                extra_headers={"X-Session-Id": f"standin-{api}-{stream}"},
            )
            message = _streamed(reply) if stream else reply.choices[0].message.model_dump(exclude_none=True)
            messages.append(message)
            for call in message.get("tool_calls") or []:
                assert json.loads(call["function"]["arguments"])["command"] in READ_ONLY_COMMANDS
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "README.md notes.txt"})
                calls += 1
            if not message.get("tool_calls"):
                break
        record = httpx.get(f"{url}/sessions/standin-{api}-{stream}").json()
    assert calls >= 3 and not messages[-1].get("tool_calls")
    assert record["breaks"] == []
    sampled = sum(end - start for turn in record["turns"] for start, end in [turn["completion"]])
    assert sum(record["loss_mask"]) == sampled > 0


def _streamed(chunks) -> dict:
    message: dict = {"role": "assistant", "content": ""}
    calls: dict[int, dict] = {}
    for chunk in chunks:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        message["content"] += delta.content or ""
        for piece in delta.tool_calls or []:
            call = calls.setdefault(
                piece.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            call["id"] = piece.id or call["id"]
            call["function"]["name"] += (piece.function.name or "") if piece.function else ""
            call["function"]["arguments"] += (piece.function.arguments or "") if piece.function else ""
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return message


@requires_shared
@pytest.mark.shared
def test_a_request_the_stand_in_cannot_read_is_refused_in_one_line(capfd):
    httpx = pytest.importorskip("httpx")
    from tito_audit.gateway.standin.server import StandinServer

    server = StandinServer(standin("Qwen/Qwen2.5-7B-Instruct"), "Qwen/Qwen2.5-7B-Instruct")
    try:
        bad = httpx.post(f"{server.url}/v1/completions", json={"prompt": "text, not ids", "max_tokens": 4})
        other = httpx.post(f"{server.url}/v1/completions", json={"model": "other", "prompt": [1, 2]})
        outside = httpx.post(f"{server.url}/generate", json={"input_ids": [10**9]})
        good = httpx.post(f"{server.url}/generate", json={"input_ids": [9707, 11], "return_logprob": True})
    finally:
        server.close()
    assert (bad.status_code, other.status_code, outside.status_code, good.status_code) == (400, 404, 400, 200)
    assert "list of token ids" in bad.json()["error"]["message"]
    meta = good.json()["meta_info"]
    assert meta["finish_reason"]["type"] in ("stop", "length")
    assert [row[1] for row in meta["output_token_logprobs"]] == good.json()["output_ids"]
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("standin engine: 4") for line in lines)


def _prompt(model, messages: list[dict], tools: list[dict] | None) -> list[int]:
    with model.machinery.lock:
        return model.machinery.renderer.prefixes(messages, tools, [(len(messages), True)])[(len(messages), True)].ids


def _looked(model, messages: list[dict], tools: list[dict], turns: int) -> list[dict]:
    """``messages`` after ``turns`` calls of the stand-in, each answered."""
    for number in range(turns):
        call = {"id": f"call_{number:024d}", "type": "function", "function": {"name": "Bash", "arguments": {}}}
        messages = [
            *messages,
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "README.md notes.txt"},
        ]
    return messages


@requires_shared
@pytest.mark.shared
@pytest.mark.parametrize("model_id", ["Qwen/Qwen3-4B", "openai/gpt-oss-20b", "google/gemma-4-E2B-it"])
def test_a_summary_asked_with_tools_declared_is_text_and_the_restart_from_it_answers(model_id):
    """Codex's and Claude Code's compactions ask for a summary with their tools still declared: a model writes the
    summary (before, the stand-in called a tool, so Codex restarted from a summary of nothing and looked again, for
    ever, and Claude Code's summary came back empty); restarted from it, the model goes on from the work it says was
    done."""
    model = standin(model_id, 3)
    stops = sorted(model.machinery.stop_ids)
    task = [{"role": "system", "content": "You look around."}, {"role": "user", "content": "What is in this folder?"}]
    history = _looked(model, task, [BASH, READ], 6)
    for ask in (CODEX_COMPACTION, CLAUDE_COMPACT):
        turn = model.complete(_prompt(model, [*history, {"role": "user", "content": ask}], [BASH, READ]), 2048, stops)
        assert not turn.message.get("tool_calls") and "I ran 6 commands" in turn.message["content"]
    summary = model.complete(
        _prompt(model, [*history, {"role": "user", "content": CODEX_COMPACTION}], [BASH, READ]), 2048, stops
    )
    restart = [*task, {"role": "user", "content": CODEX_RESTART + summary.message["content"]}]
    assert not model.complete(_prompt(model, restart, [BASH, READ]), 2048, stops).message.get("tool_calls")


@requires_shared
@pytest.mark.shared
def test_a_text_based_loop_gets_its_commands_in_its_fence_then_the_command_that_finishes():
    model = standin("Qwen/Qwen3-4B", 5)
    stops = sorted(model.machinery.stop_ids)
    messages: list[dict] = [{"role": "system", "content": MINI_TEXT_BASED}, {"role": "user", "content": "Look around."}]
    written = []
    for _ in range(8):
        content = model.complete(_prompt(model, messages, None), 2048, stops).message["content"]
        written.append(content)
        if "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in content:
            break
        messages += [
            {"role": "assistant", "content": content},
            {"role": "user", "content": "<returncode>0</returncode>"},
        ]
    fenced = re.compile(r"```mswea_bash_command\n(.+)\n```")
    commands = [fenced.search(text).group(1) for text in written]
    assert commands[-1] == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" and 3 <= len(commands) <= 7
    assert set(commands[:-1]) <= set(READ_ONLY_COMMANDS)
