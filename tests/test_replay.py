"""`tito-audit replay`: a consistent rollout passes; a re-tokenized one is caught at the right turn and token."""

from __future__ import annotations

import json
import random

import pytest

from tests import templates
from tests.helpers import load
from tests.test_cli import run_cli
from tito_audit.conversations.generate import generate_conversation
from tito_audit.model.render import Renderer
from tito_audit.model.tokens import TokenCodec


@pytest.fixture(scope="module")
def setup(tiny_model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "good.jinja"
    path.write_text(templates.GOOD, encoding="utf-8")
    model = load(tiny_model_dir, path)
    return model, path, TokenCodec(model.tokenizer)


def sampled_rollout(model, codec, conversation):
    """Per assistant turn: the prompt an append-only loop gives and the completion it samples."""
    renderer = Renderer(model, codec)
    messages, tools = conversation.messages, conversation.tools
    stop = codec.id_of("<|im_end|>")
    turns, buffer, buffer_text = [], None, None
    for j, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = renderer.prefixes(messages, tools, [(j, True)])[(j, True)]
        prompt_ids = prompt.ids if buffer is None else buffer + codec.encode(prompt.text[len(buffer_text) :])
        full = renderer.text(messages[: j + 1], tools, False)
        generated = full[len(prompt.text) :]
        ids = codec.encode(generated)
        completion = ids[: ids.index(stop) + 1]
        turns.append({"prompt_ids": prompt_ids, "completion_ids": completion})
        buffer, buffer_text = prompt_ids + completion, prompt.text + codec.decode(completion)
    return {"messages": messages, "tools": tools, "turns": turns}


def test_consistent_rollouts_pass(setup, tmp_path, tiny_model_dir):
    model, template, codec = setup
    records = [sampled_rollout(model, codec, generate_conversation(i, seed=2)) for i in range(4)]
    path = tmp_path / "ok.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records))
    result = run_cli(
        "replay",
        str(path),
        "--model",
        str(tiny_model_dir),
        "--template",
        str(template),
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["consistent"] and report["consistent_records"] == 4
    assert not [i for i in report["issues"] if i["kind"] == "not-appended"]


def test_retokenized_turn_is_found_at_the_right_token(setup, tmp_path, tiny_model_dir):
    model, template, codec = setup
    conversation = next(
        c
        for c in (generate_conversation(i, seed=2, max_turns=5) for i in range(50))
        if c.shape["appended"] == "tool" and sum(m["role"] == "assistant" for m in c.messages) >= 3
    )
    record = sampled_rollout(model, codec, conversation)
    assert len(record["turns"]) >= 3
    turns = record["turns"]
    canonical = turns[1]["completion_ids"]
    split = codec.noncanonical(canonical, random.Random(1))
    assert split is not None and split != canonical
    turns[1]["completion_ids"] = split  # the model sampled a non-canonical split ...
    # ... but the trainer re-tokenized the text for the next prompt (canonical ids again)
    offset = next(i for i, (a, b) in enumerate(zip(split, canonical, strict=False)) if a != b)
    expected_index = len(turns[1]["prompt_ids"]) + offset
    variants = {
        "verl-like": {
            "messages": record["messages"],
            "prompt_ids": [t["prompt_ids"] for t in turns],
            "response_ids": [t["completion_ids"] for t in turns],
        },
        "steps": {
            "messages": record["messages"],
            "steps": [{"input_ids": t["prompt_ids"], "output_ids": t["completion_ids"]} for t in turns],
        },
    }
    for name, drifted in variants.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(drifted))
        result = run_cli(
            "replay",
            str(path),
            "--model",
            str(tiny_model_dir),
            "--template",
            str(template),
            "--json",
            str(tmp_path / f"{name}.json"),
        )
        assert result.returncode == 1, result.stdout + result.stderr
        report = json.loads((tmp_path / f"{name}.json").read_text())
        issues = [i for i in report["issues"] if i["kind"] == "not-appended"]
        assert [(i["turn"], i["token_index"]) for i in issues] == [(2, expected_index)]
        roundtrip = [i for i in report["issues"] if i["kind"] == "roundtrip"]
        assert [i["turn"] for i in roundtrip] == [1]


def test_bad_rollout_files(setup, tmp_path, tiny_model_dir):
    _, template, _ = setup
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [], "turns": [{"prompt_ids": [1, "x"], "completion_ids": []}]}\n')
    result = run_cli("replay", str(bad), "--model", str(tiny_model_dir), "--template", str(template))
    assert result.returncode == 2 and "no record could be replayed" in result.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{nope\n")
    result = run_cli("replay", str(broken), "--model", str(tiny_model_dir), "--template", str(template))
    assert result.returncode == 2 and "line 1 is not valid JSON" in result.stderr


def test_replay_reports_the_break_the_guard_raises(tmp_path, tiny_model_dir):
    """A rollout on a template that swaps the stop token in history: replay's template-break is the session's
    TitoBreak, at the same turn and with the same labels."""
    from tests.test_session import TOOLS, sampled, tool_loop
    from tito_audit import TitoBreak, TitoSession

    template = tmp_path / "swap.jsonl.jinja"
    template.write_text(templates.STOP_TOKEN_SWAPPED_IN_HISTORY, encoding="utf-8")
    model = load(tiny_model_dir, template)
    guard = TitoSession.from_loaded(model, tools=TOOLS)
    messages = tool_loop(2)
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    completions = [sampled(model, messages, j, guard.stop_ids) for j in turns]
    # a re-rendering trainer: each prompt is the template's own
    prompts = [guard.template_ids(messages[:j], add_generation_prompt=True) for j in turns]
    path = tmp_path / "swap.jsonl"
    record = {"messages": messages, "tools": TOOLS, "prompt_ids": prompts, "completion_ids": completions}
    path.write_text(json.dumps(record))
    out = tmp_path / "swap.json"
    options = ["--model", str(tiny_model_dir), "--template", str(template), "--json", str(out)]
    result = run_cli("replay", str(path), *options)
    assert result.returncode == 1, result.stdout + result.stderr
    breaks = [i for i in json.loads(out.read_text())["issues"] if i["kind"] == "template-break"]
    session = guard.spawn()
    session.start(messages[: turns[0]])
    with pytest.raises(TitoBreak) as raised:
        session.extend(completions[0], messages[turns[0]], messages[turns[0] + 1 : turns[1]])
    assert breaks and turns[breaks[0]["turn"]] == raised.value.turn
    assert breaks[0]["detail"].startswith(", ".join(raised.value.causes) + ":")
    assert breaks[0]["token_index"] == raised.value.details.token_index


def test_replay_audits_the_final_appended_step(tmp_path, tiny_model_dir):
    """A record cut after the tool result of its only sampled turn: the final appended step (next prompt
    ``render(M, gp=True)``) is walked too, and its break is reported at turn 1 (after the last sampled turn)."""
    from tests.test_session import TOOLS, sampled, tool_loop
    from tito_audit import TitoSession

    template = tmp_path / "swap-final.jinja"
    template.write_text(templates.STOP_TOKEN_SWAPPED_IN_HISTORY, encoding="utf-8")
    model = load(tiny_model_dir, template)
    guard = TitoSession.from_loaded(model, tools=TOOLS)
    messages = tool_loop(2)
    first = next(j for j, m in enumerate(messages) if m["role"] == "assistant")
    second = next(j for j, m in enumerate(messages) if m["role"] == "assistant" and j > first)
    cut = messages[:second]  # the assistant's call and its tool results, then the rollout stops
    assert cut[-1]["role"] == "tool"
    completion = sampled(model, cut, first, guard.stop_ids)
    prompt = guard.template_ids(cut[:first], add_generation_prompt=True)
    record = {"messages": cut, "tools": TOOLS, "prompt_ids": [prompt], "completion_ids": [completion]}
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(record))
    out = tmp_path / "cut.json"
    result = run_cli(
        "replay", str(path), "--model", str(tiny_model_dir), "--template", str(template), "--json", str(out)
    )
    # the saved prompt was appended (exit 0: TITO-consistent); the step after it is where the template breaks
    assert result.returncode == 0, result.stdout + result.stderr
    breaks = [i for i in json.loads(out.read_text())["issues"] if i["kind"] == "template-break"]
    assert [b["turn"] for b in breaks] == [1]
    assert breaks[0]["detail"].startswith("stop-token-swap")


@pytest.mark.parametrize("other", ["user message", "tools"])
def test_a_record_whose_prompts_render_another_conversation_is_not_consistent(tmp_path, tiny_model_dir, other):
    """The saved ids were sampled for another conversation (another user message, other tools): appended or not,
    its prompts are not the render of its own messages, and replay says so in its verdict and exit code."""
    template = tmp_path / "with-tools.jinja"
    template.write_text(templates.build(preamble="{%- if tools %}{{ tools | tojson }}{% endif -%}"), encoding="utf-8")
    model = load(tiny_model_dir, template)
    codec = TokenCodec(model.tokenizer)
    conversation = generate_conversation(1, seed=2)
    record = sampled_rollout(model, codec, conversation)
    if other == "user message":
        first_user = next(m for m in record["messages"] if m["role"] == "user")
        first_user["content"] = "A question nobody asked the model."
    else:
        record["tools"] = [{"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}]
    path = tmp_path / "foreign.jsonl"
    path.write_text(json.dumps(record))
    options = ["--model", str(tiny_model_dir), "--template", str(template), "--json", str(tmp_path / "r.json")]
    result = run_cli("replay", str(path), *options)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "not the render of their own messages: record 0" in result.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert not report["consistent"] and not report["results"][0]["own_prompts"]
    assert [i["turn"] for i in report["issues"] if i["kind"] == "foreign-prompt"][:1] == [0]
