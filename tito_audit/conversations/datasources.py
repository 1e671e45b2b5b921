"""Real conversations: load trajectories from files or hub data sets and adapt them to OpenAI messages.

Sources: a local ``.json`` (an array of records, or one record), ``.jsonl``, ``.traj`` (SWE-agent) or
``.parquet`` file, or a hub data set id. Parquet files and hub data sets are read through ``datasets``.
Local JSON and JSONL are parsed as JSON directly: Arrow needs one schema for all records and fills the
keys a record lacks with nulls, which would change tool-call arguments (and so the rendered text).

Adapters accept the common variants: messages under ``messages``/``traj``/``trajectory``/``history``/
``conversations`` (or a bare list); arguments as strings or dicts; ``tool_call_ids`` lists instead of
``tool_call_id``; tool results without a ``name`` (taken from the matching call); content as a list of
text parts; ShareGPT ``from``/``value`` turns. Records that cannot be adapted are skipped and counted
with the reason; nothing is dropped silently. Records without tool schemas take them from ``--tools``, or, by
a documented convention, from the one file named ``<data file's stem>.tools.json`` or ``*_tools*.json`` beside
the data file (the report names it; a bad one is refused naming it as the file found beside the data, never as
``--tools``). No other file beside the data is read.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit import inputs
from tito_audit.conversations.conversation import ASSISTANT, Conversation, Message
from tito_audit.conversations.validate import ENCODE_PROBLEM, problems_of
from tito_audit.errors import BadInputError

_MESSAGE_NUMBER = re.compile(r"^message \d+ (\(\w+\) )?")
MESSAGE_KEYS = ("messages", "traj", "trajectory", "history", "conversations", "conversation", "chat")
STANDARD_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "model": "assistant",
    "system": "system",
    "tool": "tool",
    "observation": "tool",
    "function_response": "tool",
    "function_call": "assistant",
}


@dataclass
class DataSet:
    """What was loaded from one source."""

    name: str
    tools: str | None = None
    """The file the tool schemas came from when the records carry none."""
    records: int = 0
    conversations: list[Conversation] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    """Reason -> number of records skipped for it."""

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tools": self.tools,
            "records": self.records,
            "conversations": len(self.conversations),
            "skipped": dict(sorted(self.skipped.items())),
        }


class SkipRecord(Exception):
    """A record that cannot be adapted; the message is the reason."""


def read_text(path: Path, label: str = "--conversations") -> str:
    """A UTF-8 file's text (bounded: :data:`~tito_audit.inputs.MAX_DATA_BYTES`), or a one-line
    :class:`BadInputError` naming ``label``."""
    return inputs.read_text(path, label, inputs.MAX_DATA_BYTES)


def parse_jsonl(path: Path, text: str) -> list[Any]:
    """One JSON value per non-empty line; the first bad line is named in the error."""
    return [value for number, line in enumerate(text.splitlines(), start=1) if (value := _line(path, number, line))]


def _line(path: Path, number: int, line: str) -> Any:
    """The JSON value of line ``number`` (None for a blank line)."""
    if not line.strip():
        return None
    try:
        return json.loads(line)
    except RecursionError as exc:
        raise BadInputError(f"{path}: line {number} is JSON nested too deeply to read (RecursionError)") from exc
    except ValueError as exc:
        raise BadInputError(f"{path}: line {number} is not valid JSON ({exc})") from exc


def jsonl_records(path: Path, label: str = "--conversations") -> Iterator[Any]:
    """The records of a JSONL file, one line read and parsed at a time as they are asked for: a caller that stops
    after a few (``--limit``) reads no more of the file (a 200 MB file of 468k records was read and parsed whole,
    30 s and 1.85 GB, to audit three). Errors as :func:`read_text` and :func:`parse_jsonl` give them."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed when the generator ends or is dropped)
    except OSError:
        read_text(path, label)  # the same one-line error as reading it whole
        raise
    with handle:
        offset = 0
        for number, raw in enumerate(handle, start=1):
            offset += len(raw)
            if offset > inputs.MAX_DATA_BYTES:
                raise BadInputError(f"{label} {path}: larger than {inputs.MAX_DATA_BYTES} bytes")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                at = offset - len(raw) + exc.start
                raise BadInputError(f"{label} {path}: not valid UTF-8 ({exc.reason} at byte {at})") from exc
            value = _line(path, number, line)
            if value is not None:
                yield value


def json_records(path: Path, label: str = "--conversations") -> Iterator[Any]:
    """The records of a JSON file: an array's items parsed one at a time as they are asked for (the text is read
    whole, its records are not all parsed), or the one record the file holds (an object, or a bare list of
    messages)."""
    text = read_text(path, label)
    decoder = json.JSONDecoder()
    start = _skip_space(text, 0)
    if not text.startswith("[", start):
        yield inputs.parse_json(text, path, label)
        return
    position = _skip_space(text, start + 1)
    if text.startswith("]", position):
        yield from _whole(text, path, label)
        return
    first, position = _item(decoder, text, position, path, label)
    if isinstance(first, dict) and ("role" in first or "from" in first):  # perhaps one record: a list of messages
        yield from _whole(text, path, label)
        return
    yield first
    while True:
        position = _skip_space(text, position)
        if text.startswith("]", position):
            return
        if not text.startswith(",", position):
            inputs.parse_json(text, path, label)  # names what is wrong, as the whole parse does
            raise BadInputError(f"{label} {path}: not valid JSON (a list's items not separated at {position})")
        item, position = _item(decoder, text, _skip_space(text, position + 1), path, label)
        yield item


def _whole(text: str, path: Path, label: str) -> Iterator[Any]:
    document = inputs.parse_json(text, path, label)
    yield from (document if isinstance(document, list) and not _is_message_list(document) else [document])


def _item(decoder: json.JSONDecoder, text: str, position: int, path: Path, label: str) -> tuple[Any, int]:
    try:
        return decoder.raw_decode(text, position)
    except RecursionError as exc:
        raise BadInputError(f"{label} {path}: JSON nested too deeply to read (RecursionError)") from exc
    except ValueError as exc:
        inputs.parse_json(text, path, label)  # the whole parse's own message (line and column)
        raise BadInputError(f"{label} {path}: not valid JSON ({exc})") from exc


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _read_local(path: Path, split: str) -> Iterable[Any]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _through_datasets("parquet", split, data_files=str(path))
    if suffix == ".jsonl":
        return jsonl_records(path)
    return json_records(path)


def _through_datasets(builder_or_id: str, split: str, **kwargs: Any) -> Iterator[Any]:
    try:
        import datasets

        datasets.logging.set_verbosity_error()
        datasets.disable_progress_bars()
        dataset = datasets.load_dataset(builder_or_id, split=split, **kwargs)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInputError(f"cannot load data set '{builder_or_id}' (split {split}): {first}") from exc
    return iter(dataset)  # rows made as they are read


def _is_message_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and ("role" in m or "from" in m) for m in value)
    )


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _messages_of(record: Any) -> tuple[list[Any], Any]:
    if _is_message_list(record):
        return record, None
    if not isinstance(record, dict):
        raise SkipRecord("record is neither an object nor a list of messages")
    for key in MESSAGE_KEYS:
        value = _maybe_json(record.get(key))
        if _is_message_list(value):
            return value, _maybe_json(record.get("tools"))
    raise SkipRecord("no list of messages (looked for " + ", ".join(MESSAGE_KEYS) + ")")


def _text_content(content: Any) -> Any:
    """Content as a list of parts -> their text, joined; other non-text parts make the record unusable."""
    if not isinstance(content, list):
        return content
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
            texts.append(str(part.get("text", "")))
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise SkipRecord(f"content part of type {kind!r} (only text is audited)")
    return "".join(texts)


def _sharegpt(turn: dict[str, Any]) -> Message:
    role = SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
    if role is None:
        raise SkipRecord(f"ShareGPT turn from {turn.get('from')!r}")
    value = turn.get("value")
    if str(turn.get("from")).lower() == "function_call":
        call = _maybe_json(value)
        if not isinstance(call, dict) or "name" not in call:
            raise SkipRecord("ShareGPT function_call without a JSON {name, arguments}")
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": call["name"], "arguments": call.get("arguments", {})}}
            ],
        }
    return {"role": role, "content": value}


def _tool_call(call: Any, index: int) -> dict[str, Any]:
    call = _maybe_json(call)
    if not isinstance(call, dict):
        raise SkipRecord("a tool call is not an object")
    function = _maybe_json(call.get("function")) or {k: call[k] for k in ("name", "arguments") if k in call}
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise SkipRecord("a tool call has no function name")
    arguments = function.get("arguments", {})
    return {
        "id": str(call.get("id") or f"call{index:05d}"),
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments if arguments is not None else {}},
    }


def adapt_messages(raw: list[Any]) -> list[Message]:
    """OpenAI-style messages from any of the accepted variants (raises :class:`SkipRecord`)."""
    messages: list[Message] = []
    call_names: dict[str, str] = {}
    calls_seen = 0
    for item in raw:
        if not isinstance(item, dict):
            raise SkipRecord("a message is not an object")
        message = _sharegpt(item) if "from" in item and "role" not in item else dict(item)
        adapted: Message = {k: message[k] for k in STANDARD_FIELDS if k in message}
        adapted["content"] = _text_content(message.get("content"))
        calls = _maybe_json(message.get("tool_calls"))
        if calls:
            if not isinstance(calls, list):
                raise SkipRecord("tool_calls is not a list")
            adapted["tool_calls"] = [_tool_call(call, calls_seen + n) for n, call in enumerate(calls)]
            calls_seen += len(calls)
            for call in adapted["tool_calls"]:
                call_names[call["id"]] = call["function"]["name"]
        elif "tool_calls" in adapted:
            del adapted["tool_calls"]
        if adapted.get("role") == "tool":
            ids = _maybe_json(message.get("tool_call_ids"))
            if "tool_call_id" not in adapted and isinstance(ids, list) and ids:
                adapted["tool_call_id"] = str(ids[0])
            if "name" not in adapted and adapted.get("tool_call_id") in call_names:
                adapted["name"] = call_names[adapted["tool_call_id"]]
        messages.append(adapted)
    if sum(1 for m in messages if m.get("role") == ASSISTANT) < 1:
        raise SkipRecord("no assistant turn")
    return messages


def read_tools(path: Path | None, label: str) -> list[dict] | None:
    """The tool schemas in ``path``: a JSON list of objects. ``label`` names where the file came from (``--tools``,
    or the convention that found it beside a data file)."""
    if path is None:
        return None
    tools = inputs.parse_json(inputs.read_text(path, label, inputs.MAX_LIST_BYTES), path, label)
    if not isinstance(tools, list):
        raise BadInputError(f"{label} {path}: not a JSON list of tool schemas (a {type(tools).__name__})")
    for number, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise BadInputError(
                f"{label} {path}: not a JSON list of tool schemas (item {number} is {json.dumps(tool)[:40]}, "
                "not an object)"
            )
    return tools


def sibling_tools(path: Path) -> Path | None:
    """The tools file beside a data file, by convention: ``<stem>.tools.json``, else the one ``*_tools*.json`` file
    (``airline_tools.json`` beside ``airline.json``); None when there is none, or more than one to choose from."""
    own = path.with_name(f"{path.stem}.tools.json")
    if own.is_file() and own != path:
        return own
    candidates = [p for p in sorted(path.parent.glob("*_tools*.json")) if p != path and p.is_file()]
    return candidates[0] if len(candidates) == 1 else None


def _skip_reason(problem: str) -> str:
    """A validation problem as a skip reason: counted by kind whichever message it was (``has an unknown role
    'bot'``), except text the tokenizer cannot take, where the message and the character are what one looks for."""
    return problem if ENCODE_PROBLEM in problem else _MESSAGE_NUMBER.sub("", problem)


PROGRESS_RECORDS = 10_000
"""Records between two calls of ``load_conversations``'s ``on_progress``."""


def load_conversations(
    source: str,
    *,
    split: str = "train",
    limit: int | None = None,
    tools_file: Path | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> DataSet:
    """Conversations of ``source`` (a file or a hub data set id), adapted, with skipped records counted;
    ``on_progress(records)`` every :data:`PROGRESS_RECORDS` records read."""
    path = Path(source).expanduser()
    if path.is_file():
        records = _read_local(path, split)
        name = path.name
    elif path.exists():
        raise BadInputError(f"--conversations {source}: not a file")
    elif "/" in source and not source.startswith((".", "/", "~")):
        records = _through_datasets(source, split)
        name = f"{source}:{split}"
    else:
        raise BadInputError(f"--conversations {source}: no such file")
    label = "--tools"
    if tools_file is None and path.is_file():
        tools_file = sibling_tools(path)
        label = f"the tools file found beside {path.name} (by its name's convention):"
    shared_tools = read_tools(tools_file, label)
    dataset = DataSet(name=name, tools=tools_file.name if tools_file is not None else None)
    for index, record in enumerate(records):
        if limit is not None and dataset.records >= limit:
            break
        dataset.records += 1
        if on_progress is not None and not dataset.records % PROGRESS_RECORDS:
            on_progress(dataset.records)
        try:
            raw, tools = _messages_of(record)
            messages = adapt_messages(raw)
        except SkipRecord as reason:
            dataset.skipped[str(reason)] += 1
            continue
        conversation = Conversation(
            id=f"{name}#{index}",
            messages=messages,
            tools=tools if isinstance(tools, list) and tools else shared_tools,
            shape={"source": name},
        )
        problems = problems_of(conversation)
        if problems:
            dataset.skipped[_skip_reason(problems[0])] += 1
            continue
        dataset.conversations.append(conversation)
    return dataset
