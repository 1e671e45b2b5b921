"""The messages tito-audit and vLLM's worker exchange (:mod:`tito_audit.parse.vllm_messages`), on a pipe of bytes."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from tito_audit.parse.vllm_messages import (
    HEADER,
    ErrorKind,
    Op,
    error,
    error_kind,
    is_error,
    read_message,
    write_message,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(st.lists(JSON, max_size=4))
def test_messages_come_out_of_the_pipe_as_they_went_in_one_by_one(messages):
    pipe = io.BytesIO()
    for message in messages:
        write_message(pipe, message)
    pipe.seek(0)
    assert [read_message(pipe) for _ in messages] == messages
    assert read_message(pipe) is None  # the pipe closed: no message, not an error


def test_a_message_is_its_length_then_its_json_with_non_ascii_kept():
    pipe = io.BytesIO()
    write_message(pipe, {"op": Op.PARSE, "text": "café"})
    data = pipe.getvalue()
    (size,) = HEADER.unpack(data[: HEADER.size])
    assert data[HEADER.size :] == '{"op": "parse", "text": "café"}'.encode()
    assert size == len(data) - HEADER.size


def test_an_error_answer_names_its_kind_and_an_unknown_kind_reads_as_internal():
    answer = error("no such parser", ErrorKind.NAMES)
    assert is_error(answer) and error_kind(answer) is ErrorKind.NAMES
    assert error_kind({"error": "?", "kind": "from a newer worker"}) is ErrorKind.INTERNAL
    assert not is_error({"text": "hi", "skip_special_tokens": True})
