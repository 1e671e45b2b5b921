"""Bad input from a library caller or the command line: one clear error naming what is at fault, never a
traceback, an "unexpected" error, a TitoBreak or a silently changed result."""

from __future__ import annotations

import array
import json
from datetime import datetime

import numpy as np
import pytest
from typer.testing import CliRunner

from tests import templates
from tests.helpers import load
from tests.test_cli import run_cli
from tito_audit import TitoBreak, TitoSession
from tito_audit.audit.service import SCHEMA_VERSION, AuditOptions, audit
from tito_audit.cli import app
from tito_audit.conversations.conversation import Conversation
from tito_audit.conversations.windows import window
from tito_audit.errors import BadInputError
from tito_audit.gate.policy import Policy, check_baseline_model, load_baseline

HELLO = [{"role": "user", "content": "What is the weather?"}]
ANSWER = {"role": "assistant", "content": "Let me look."}
RESULT = [{"role": "user", "content": "Go on."}]


@pytest.fixture(scope="module")
def good(tiny_model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("bad-input") / "good.jinja"
    path.write_text(templates.GOOD, encoding="utf-8")
    return load(tiny_model_dir, path), path


def session(good) -> TitoSession:
    return TitoSession.from_loaded(good[0], clock=datetime(2026, 1, 15))


def completion(codec) -> list[int]:
    return codec.encode("Let me look.<|im_end|>")


# -- token ids (item 6) ----------------------------------------------------------------------------------------
def test_an_id_outside_the_vocabulary_is_bad_input_naming_it(good):
    guard = session(good)
    prompt = guard.start(HELLO)
    ids = [*completion(guard.codec), 10**7]
    with pytest.raises(BadInputError, match=rf"completion_ids\[{len(ids) - 1}\] is 10000000, outside the vocabulary"):
        guard.extend(ids, ANSWER, RESULT)
    assert guard.buffer == prompt, "nothing went into the buffer"
    assert not issubclass(BadInputError, TitoBreak)


@pytest.mark.parametrize(
    "kind", ["list", "tuple", "numpy int64", "numpy int32", "array.array", "numpy int64 scalars", "torch"]
)
def test_any_integer_sequence_is_accepted(good, kind):
    reference, guard = session(good), session(good)
    ids = completion(guard.codec)
    if kind == "torch":
        torch = pytest.importorskip("torch", reason="torch is not installed (it is never a dependency)")
        given = torch.tensor(ids)
    else:
        given = {
            "list": ids,
            "tuple": tuple(ids),
            "numpy int64": np.array(ids, dtype=np.int64),
            "numpy int32": np.array(ids, dtype=np.int32),
            "array.array": array.array("q", ids),
            "numpy int64 scalars": [np.int64(i) for i in ids],
        }[kind]
    reference.start(HELLO)
    guard.start(HELLO)
    assert guard.extend(given, ANSWER, RESULT) == reference.extend(ids, ANSWER, RESULT)
    assert all(type(i) is int for i in guard.buffer)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (np.array([1.0, 2.5]), r"completion_ids\[0\] is 1\.0 \(float\), not an integer token id"),
        (np.array([[1, 2]]), r"completion_ids\[0\] is a sequence: token ids are one-dimensional"),
        ([3, -1], r"completion_ids\[1\] is -1: token ids are not negative"),
        ([3, True], r"completion_ids\[1\] is a boolean \(True\), not a token id"),
        ("12", r"completion_ids must be a sequence of token ids, not str"),
        (np.int64(3), r"completion_ids must be a sequence of token ids, not a single int64 value"),
    ],
)
def test_what_is_not_a_sequence_of_ids_is_said_exactly(good, given, message):
    guard = session(good)
    guard.start(HELLO)
    with pytest.raises(BadInputError, match=message):
        guard.extend(given, ANSWER, RESULT)


def test_replay_with_an_id_beyond_any_vocabulary_names_record_turn_and_position(good, tmp_path):
    model, template = good
    guard = session(good)
    prompt = guard.start(HELLO)
    record = {
        "messages": [*HELLO, ANSWER, *RESULT, ANSWER],
        "turns": [
            {"prompt_ids": prompt, "completion_ids": completion(guard.codec)},
            {"prompt_ids": prompt, "completion_ids": [5, 10**12]},
        ],
    }
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text(json.dumps(record) + "\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["replay", str(rollouts), "--model", str(model.resolved.path), "--template", str(template)]
    )
    assert isinstance(result.exception, BadInputError), result.output
    assert str(result.exception) == (
        f"ROLLOUTS r.jsonl: record 0, turn 1: completion ids[1] is 1000000000000, outside the vocabulary "
        f"(ids 0..{guard.codec.id_limit - 1})"
    )


# -- text the tokenizer cannot take (item 7) -------------------------------------------------------------------
def test_a_lone_surrogate_in_a_session_names_the_message_and_the_character(good):
    guard = session(good)
    with pytest.raises(BadInputError, match=r"messages\[0\] \(user\) has text the tokenizer cannot encode: "):
        guard.start([{"role": "user", "content": "ok \ud800 then"}])
    guard.start(HELLO)
    with pytest.raises(BadInputError, match=r"tool_messages\[1\] \(tool\) .* U\+DC00 at character 2 of content"):
        guard.extend(
            completion(guard.codec),
            ANSWER,
            [{"role": "tool", "content": "fine"}, {"role": "tool", "content": "x \udc00"}],
        )


def test_a_lone_surrogate_in_given_conversations_is_bad_input(good):
    conversation = Conversation(
        "mine", [*HELLO, {"role": "assistant", "content": "Sure.", "reasoning_content": "a\ud800"}]
    )
    with pytest.raises(BadInputError) as raised:
        audit(good[0], AuditOptions(conversations=[conversation]))
    assert str(raised.value) == (
        "conversation mine: message 1 (assistant) has text the tokenizer cannot encode: "
        "a lone surrogate U+D800 at character 1 of reasoning_content"
    )


def test_a_lone_surrogate_on_the_command_line_is_exit_2_naming_the_message(good, tmp_path):
    model, template = good
    data = tmp_path / "one.json"
    data.write_text(
        '[{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": '
        '[{"function": {"name": "f", "arguments": {}}}]}, {"role": "tool", "content": "bad \\ud800"}, '
        '{"role": "assistant", "content": "done"}]}]',
        encoding="utf-8",
    )
    result = run_cli("audit", str(model.resolved.path), "--template", str(template), "--conversations", str(data))
    assert result.returncode == 2 and "Traceback" not in result.stderr and "unexpected" not in result.stderr
    assert "message 2 (tool) has text the tokenizer cannot encode: a lone surrogate U+D800 at character 4" in (
        result.stderr
    )


# -- skipped reasons (item 8) ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "suffix", "expected"),
    [
        (
            json.dumps([{"messages": [{"role": "bot", "content": "x"}, {"role": "assistant", "content": "y"}]}] * 2),
            ".json",
            ["x.json: 2 records, 2 skipped:", "2 × has an unknown role 'bot'"],
        ),
        ("", ".jsonl", ["x.jsonl: no records"]),
        ("42", ".json", ["x.json: 1 records, 1 skipped:", "1 × record is neither an object nor a list of messages"]),
    ],
)
def test_no_conversation_loaded_prints_the_skipped_reasons(good, tmp_path, content, suffix, expected):
    data = tmp_path / f"x{suffix}"
    data.write_text(content, encoding="utf-8")
    result = CliRunner().invoke(app, ["audit", str(good[0].resolved.path), "--conversations", str(data)])
    assert isinstance(result.exception, BadInputError)
    lines = [line.strip() for line in str(result.exception).splitlines()]
    assert lines[0] == "no conversation could be loaded from --conversations:"
    assert lines[1:] == expected


# -- long conversations (item 9) -------------------------------------------------------------------------------
def long_conversation(messages: int) -> Conversation:
    turns = []
    for n in range(messages // 2):
        turns += [{"role": "user", "content": f"Question {n}?"}, {"role": "assistant", "content": f"Answer {n}."}]
    return Conversation("long", turns)


def test_a_long_conversation_is_audited_over_a_window_and_the_report_says_so(good):
    conversation = long_conversation(60)
    cut = window(conversation, 15).messages
    assert len(cut) == 15 and cut[-1]["role"] == "user", "the window ends before an assistant turn (a whole step)"
    assert window(conversation, None) is conversation and window(conversation, 60) is conversation
    report = audit(good[0], AuditOptions(conversations=[conversation], max_messages=15))
    assert report.variants[0].assistant_turns == 7
    assert any("1 conversation longer than 15 messages (up to 60) audited over a window" in n for n in report.notes)
    whole = audit(good[0], AuditOptions(conversations=[conversation], max_messages=None))
    assert whole.variants[0].assistant_turns == 30 and not any("window" in n for n in whole.notes)


def test_long_conversations_show_progress_off_a_terminal(good, tmp_path):
    data = tmp_path / "long.json"
    data.write_text(json.dumps({"messages": long_conversation(120).messages}), encoding="utf-8")
    limit = ["--max-messages", "110"]
    result = CliRunner().invoke(
        app,
        ["audit", str(good[0].resolved.path), "--template", str(good[1]), "--conversations", str(data), *limit],
    )
    assert result.exit_code == 1, result.output  # unsupported: a chat without tool calls
    assert "note: 1 conversation longer than 110 messages (up to 120) audited over a window" in result.output
    assert "auditing 1 conversations, the longest of 120 messages" in result.output
    assert "variant default: 1 of 1 conversations audited" in result.output


# -- options that would silently change the verdict (item 13; --models-file: test_matrix_faults) ----------------
def test_a_stop_token_that_is_not_one_token_is_refused(good):
    with pytest.raises(BadInputError, match=r"--stop-token 'zzqq' is not a single token of the vocabulary: it enc"):
        audit(good[0], AuditOptions(count=2, extra_stop_tokens=["zzqq"]))
    with pytest.raises(BadInputError, match="is not a single token"):
        TitoSession.from_loaded(good[0], stop_tokens=["zzqq"])
    report = audit(good[0], AuditOptions(count=2, extra_stop_tokens=["<|eot|>"]))
    assert "--stop-token" in {s for t in report.variants[0].stop_tokens for s in t.sources}


# -- check --baseline (item 14) --------------------------------------------------------------------------------
def baseline(**changes) -> dict:
    document = {
        "schema_version": SCHEMA_VERSION,
        "model": {"model_id": "acme/model"},
        "variants": [
            {
                "name": "default",
                "failures": [
                    {
                        "check": "rollout",
                        "aspect": "text",
                        "category": "tool",
                        "conversation_id": "c1",
                        "turn": 3,
                        "causes": ["closing-rewritten"],
                    }
                ],
            }
        ],
    }
    document.update(changes)
    return document


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (baseline(schema_version=99), f"schema version 99; this tool reads version {SCHEMA_VERSION}"),
        ({"failures": "x"}, "not a tito-audit JSON report (no schema_version)"),
        ([1, 2], "not a tito-audit JSON report (no schema_version)"),
        (baseline(model="acme/model"), "model.model_id is missing: not a tito-audit JSON report"),
        (baseline(variants={"default": {}}), "variants is a dict, not a list"),
        (baseline(variants=[{"name": "default", "failures": "none"}]), "variants[0].failures is a str, not a list"),
        (
            baseline(variants=[{"name": "default", "failures": [{"check": "rollout"}]}]),
            "variants[0].failures[0].aspect is missing, not text",
        ),
    ],
)
def test_a_bad_baseline_is_one_line_naming_what_is_wrong(tmp_path, document, problem):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(BadInputError) as raised:
        load_baseline(path)
    assert str(raised.value) == f"--baseline {path}: {problem}"


def test_a_baseline_of_another_model_is_refused(tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline()), encoding="utf-8")
    policy = Policy([], baseline=load_baseline(path), baseline_path=str(path))
    check_baseline_model(policy, "acme/model")
    with pytest.raises(BadInputError, match=r"a report of acme/model, not of acme/other$"):
        check_baseline_model(policy, "acme/other")
