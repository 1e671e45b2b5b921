"""Real trajectories: adapters, skipped records, scenario packs, and audits on ../shared/conversations."""

from __future__ import annotations

import json

import pytest

from tests import templates
from tests.conftest import SHARED
from tests.helpers import default_variant, load, shared_model
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.conversations.datasources import load_conversations
from tito_audit.conversations.scenarios import scenario_conversation, scenario_conversations, scenario_names
from tito_audit.conversations.validate import problems_of
from tito_audit.errors import BadInputError

CALL = {"id": "abc123def", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}


def write_jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def test_openai_records_with_string_and_dict_arguments(tmp_path):
    records = [
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "abc123def", "content": "42"},
                {"role": "assistant", "content": "It is 42."},
            ],
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
        },
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{**CALL, "function": {"name": "lookup", "arguments": {"q": "y"}}}],
                },
                {"role": "tool", "tool_call_id": "abc123def", "name": "lookup", "content": "7"},
                {"role": "assistant", "content": "7."},
            ]
        },
    ]
    dataset = load_conversations(str(write_jsonl(tmp_path / "d.jsonl", records)))
    assert dataset.records == 2 and len(dataset.conversations) == 2 and not dataset.skipped
    first, second = dataset.conversations
    assert first.messages[2]["name"] == "lookup", "missing tool names come from the matching call"
    assert isinstance(first.messages[1]["tool_calls"][0]["function"]["arguments"], str)
    assert isinstance(second.messages[1]["tool_calls"][0]["function"]["arguments"], dict)
    assert first.tools and second.tools is None


def test_variants_sharegpt_parts_and_id_lists(tmp_path):
    records = [
        {"conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi there"}]},
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": "", "tool_calls": json.dumps([CALL])},
                {"role": "tool", "tool_call_ids": ["abc123def"], "content": "ok"},
                {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
                {"role": "user", "content": "thanks"},
            ]
        },
        {
            "conversations": [
                {"from": "human", "value": "q"},
                {"from": "function_call", "value": json.dumps({"name": "lookup", "arguments": {"q": 1}})},
                {"from": "observation", "value": "r"},
                {"from": "gpt", "value": "a"},
            ]
        },
    ]
    dataset = load_conversations(str(write_jsonl(tmp_path / "v.jsonl", records)))
    assert not dataset.skipped and len(dataset.conversations) == 3
    sharegpt, parts, function_call = dataset.conversations
    assert [m["role"] for m in sharegpt.messages] == ["user", "assistant"]
    assert parts.messages[0]["content"] == "ab" and parts.messages[2]["tool_call_id"] == "abc123def"
    assert parts.messages[-1]["role"] == "user", "messages after the last assistant turn are kept (the final step)"
    assert function_call.messages[1]["tool_calls"][0]["function"]["name"] == "lookup"
    assert function_call.messages[2]["role"] == "tool"


def test_malformed_records_are_skipped_with_reasons(tmp_path):
    records = [
        {"nothing": "here"},
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                {"role": "assistant", "content": "a"},
            ]
        },
        {"messages": [{"role": "wizard", "content": "x"}, {"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "user", "content": "only a question"}]},
        ["not", "messages"],
        {"messages": [{"role": "user", "content": "fine"}, {"role": "assistant", "content": "ok"}]},
    ]
    dataset = load_conversations(str(write_jsonl(tmp_path / "m.jsonl", records)))
    assert len(dataset.conversations) == 1 and sum(dataset.skipped.values()) == 5
    reasons = " | ".join(dataset.skipped)
    assert "no list of messages" in reasons and "image_url" in reasons and "unknown role 'wizard'" in reasons
    assert "no assistant turn" in reasons


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"messages": []}\n{oops\n', "line 2 is not valid JSON"),
        (b"\xff\xfe", "not valid UTF-8"),
    ],
)
def test_unreadable_files_are_one_line_errors(tmp_path, content, fragment):
    path = tmp_path / ("bad.jsonl" if b"oops" in content else "bad.json")
    path.write_bytes(content)
    with pytest.raises(BadInputError, match=fragment):
        load_conversations(str(path))


def test_limit_and_missing_file(tmp_path):
    records = [
        {"messages": [{"role": "user", "content": str(i)}, {"role": "assistant", "content": "a"}]} for i in range(5)
    ]
    assert load_conversations(str(write_jsonl(tmp_path / "l.jsonl", records)), limit=2).records == 2
    with pytest.raises(BadInputError, match="no such file"):
        load_conversations(str(tmp_path / "missing.jsonl"))


def test_parquet_through_datasets(tmp_path):
    from datasets import Dataset

    rows = [{"messages": json.dumps([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}])}]
    Dataset.from_list(rows).to_parquet(str(tmp_path / "p.parquet"))
    dataset = load_conversations(str(tmp_path / "p.parquet"))
    assert len(dataset.conversations) == 1 and dataset.conversations[0].messages[1]["content"] == "y"


@pytest.mark.parametrize("name", scenario_names())
def test_scenarios_are_valid_and_seeded(name):
    for index in range(6):
        conversation = scenario_conversation(name, index, seed=3)
        assert not problems_of(conversation)
        assert conversation.messages[-1]["role"] == "assistant"
        assert conversation == scenario_conversation(name, index, seed=3)
    assert scenario_conversation(name, 0, seed=3) != scenario_conversation(name, 0, seed=4)
    styles = {scenario_conversation(name, i, seed=3).shape["style"] for i in range(2)}
    assert styles == {"tool", "text"}


def test_unknown_scenario():
    with pytest.raises(BadInputError, match="unknown scenario"):
        list(scenario_conversations(["chess"], 1, 0))


def test_audit_runs_on_loaded_conversations(tiny_model_dir, write_template, tmp_path):
    records = [
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "abc123def", "content": "42"},
                {"role": "assistant", "content": "It is 42."},
            ]
        }
    ] * 3
    dataset = load_conversations(str(write_jsonl(tmp_path / "r.jsonl", records)))
    model = load(tiny_model_dir, write_template("empty-think", templates.EMPTY_THINK_ONLY_WHEN_LAST))
    report = audit(
        model,
        AuditOptions(conversations=dataset.conversations, conversations_source="r.jsonl", datasets=[dataset.summary()]),
    )
    variant = default_variant(report)
    assert report.verdict == "broken" and variant.conversations_audited == 3
    assert report.settings.datasets[0]["records"] == 3
    assert {f.conversation_id for f in variant.failures if f.check == "rollout"} <= {
        "r.jsonl#0",
        "r.jsonl#1",
        "r.jsonl#2",
    }


TAU = SHARED / "conversations" / "tau-bench" / "gpt-4o-airline.json"
SWE = sorted((SHARED / "conversations" / "swe-agent").glob("*.traj")) if (SHARED / "conversations").is_dir() else []


@pytest.mark.skipif(not TAU.is_file(), reason="../shared/conversations is absent")
def test_shared_trajectories_load_completely():
    tau = load_conversations(str(TAU))
    assert tau.records == 200 and len(tau.conversations) == 200 and not tau.skipped
    assert tau.tools == "airline_tools.derived.json" and tau.conversations[0].tools
    calls = [c for conv in tau.conversations for m in conv.messages for c in m.get("tool_calls") or []]
    assert calls and all(isinstance(c["function"]["arguments"], str) for c in calls)
    for path in SWE:
        swe = load_conversations(str(path))
        assert len(swe.conversations) == 1 and not swe.skipped
        tool_messages = [m for m in swe.conversations[0].messages if m["role"] == "tool"]
        assert tool_messages and all(m.get("tool_call_id") and m.get("name") for m in tool_messages)


@pytest.mark.skipif(not TAU.is_file(), reason="../shared/conversations is absent")
def test_real_traffic_finds_what_probes_find(tiny_model_dir, write_template):
    tau = load_conversations(str(TAU), limit=10)
    model = load(tiny_model_dir, write_template("empty-think", templates.EMPTY_THINK_ONLY_WHEN_LAST))
    report = audit(model, AuditOptions(conversations=tau.conversations))
    variant = default_variant(report)
    assert variant.conversations_audited == 10
    assert report.verdict == "broken" and "empty-think-dropped" in variant.checks["rollout"].cause_counts
    good = load(tiny_model_dir, write_template("good", templates.GOOD))
    assert audit(good, AuditOptions(conversations=tau.conversations)).verdict == "ready"


MILES = SHARED / "conversations" / "miles-mock" / "mock_trajectories.json"


@pytest.mark.skipif(not MILES.is_file(), reason="../shared/conversations (miles' mock trajectories) is absent")
def test_final_appended_step_of_every_miles_record_is_audited():
    """Every corpus model audits the final appended step of each record that ends after its last assistant turn
    (counted from the file itself) and that its template takes as written."""
    records = json.loads(MILES.read_text(encoding="utf-8"))
    ending_after_assistant = sum(
        1
        for record in records
        if record["messages"][-1]["role"] != "assistant" and any(m["role"] == "assistant" for m in record["messages"])
    )
    assert ending_after_assistant == 14
    conversations = load_conversations(str(MILES)).conversations
    assert len(conversations) == len(records)
    mirror = SHARED / "tokenizers"
    audited, exact = [], []
    for folder in sorted(p for p in mirror.iterdir() if p.is_dir()):
        model = shared_model(folder.name.replace("--", "/", 1))
        report = audit(model, AuditOptions(conversations=conversations, conversations_source="miles"))
        for variant in report.variants:
            if variant.verdict == "unsupported":
                continue  # reshaped into chat: its tool steps say nothing
            notes = [n for n in variant.checks["rollout"].notes if "final appended step" in n]
            assert notes, (folder.name, variant.name)
            counted = int(notes[0].split()[0])
            reshaped_or_refused = sum(refusal.count for refusal in variant.refused)
            # a record the template takes as written has its final step audited; one it takes only in another
            # shape (or not at all) may lose it (chat-only drops the trailing tool results)
            least = ending_after_assistant - reshaped_or_refused
            assert least <= counted <= ending_after_assistant, (folder.name, notes)
            audited.append(folder.name)
            if not variant.refused:
                exact.append(folder.name)
    assert len(set(audited)) >= 8 and len(set(exact)) >= 3
