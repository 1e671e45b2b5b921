"""``--conversations FILE --limit N`` reads what the N records need: the records after them are not parsed (a bad
line further on is never reached), and memory does not grow with the file."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from tito_audit.conversations.datasources import load_conversations
from tito_audit.errors import BadInputError

RECORD = {
    "messages": [
        {"role": "user", "content": "What is the weather in Paris?" * 20},
        {"role": "assistant", "content": "Sunny." * 50},
    ]
}
MANY = 40_000
"""Records in the big files (about 50 MB)."""


@pytest.fixture(scope="module")
def big_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("big")
    line = json.dumps(RECORD)
    jsonl = folder / "big.jsonl"
    jsonl.write_text("\n".join([line] * MANY) + "\n{this line is not JSON\n", encoding="utf-8")
    array = folder / "big.json"
    array.write_text("[\n" + ",\n".join([line] * MANY) + ",\n{this is not JSON}]", encoding="utf-8")
    return jsonl, array


@pytest.mark.parametrize("name", ["big.jsonl", "big.json"])
def test_a_limit_reads_only_the_records_it_needs(big_files, name):
    path = next(p for p in big_files if p.name == name)
    tracemalloc.start()
    try:
        dataset = load_conversations(str(path), limit=3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert dataset.records == 3 and len(dataset.conversations) == 3
    file_bytes = path.stat().st_size
    # a JSON array is read as text whole (its items are parsed one at a time); JSONL a line at a time
    bound = 3 * file_bytes if name == "big.json" else file_bytes // 10
    assert peak < bound, f"{peak / 2**20:.0f} MiB traced for a {file_bytes / 2**20:.0f} MiB file"


@pytest.mark.parametrize("name", ["big.jsonl", "big.json"])
def test_without_a_limit_the_bad_record_is_still_named(big_files, name):
    path = next(p for p in big_files if p.name == name)
    with pytest.raises(BadInputError, match="not valid JSON") as refused:
        load_conversations(str(path))
    assert "\n" not in str(refused.value)


def test_a_bare_list_of_messages_is_one_record(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(RECORD["messages"]), encoding="utf-8")
    dataset = load_conversations(str(path))
    assert dataset.records == 1 and len(dataset.conversations) == 1
