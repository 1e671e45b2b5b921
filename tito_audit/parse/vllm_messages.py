"""What tito-audit and vLLM's worker process say to each other: the operations, their requests and answers, the kinds
of error, and how a message travels on the pipe.

Both sides import this module and nothing else of each other: :mod:`tito_audit.parse.vllm_process` (the client) and
:mod:`tito_audit.parse.vllm_worker` (what runs inside the worker, beside vLLM). A message is a 4-byte big-endian
length and that many bytes of JSON (UTF-8, non-ASCII kept as it is); every request names its operation in ``op``,
and every answer is either the operation's answer or an :class:`ErrorAnswer`.

>>> decode(encode(hello())[HEADER.size:]) == {"op": "hello"}
True
"""

from __future__ import annotations

import json
import struct
from enum import Enum
from typing import Any, BinaryIO, TypedDict, TypeGuard

HEADER = struct.Struct(">I")
"""The length that comes before each message's bytes."""


class Op(str, Enum):
    """The operations the worker answers (the worker module's docstring says what vLLM code each one runs)."""

    HELLO = "hello"
    """vLLM's version, once it is imported (the first answer a worker gives)."""
    NAMES = "names"
    """The tool-call and reasoning parsers vLLM has registered."""
    OPEN = "open"
    """Load a model's tokenizer (and a parser pair on it)."""
    HAND_OVER = "hand_over"
    """The text vLLM's engine hands its parser for sampled ids."""
    PARSE = "parse"
    """The message fields vLLM's parser makes of a completion."""
    RENDER = "render"
    """Prefixes of a conversation as vLLM's renderer writes them (a model rendered in code)."""


class ErrorKind(str, Enum):
    """Why the worker could not answer; the client turns each into its own error."""

    IMPORT = "import"
    """vLLM could not be imported: the parsers are unavailable here."""
    NAMES = "names"
    """A parser name vLLM does not know."""
    TOKENIZER = "tokenizer"
    """vLLM could not load the model's tokenizer."""
    PARSER = "parser"
    """vLLM refused to compose the parser pair on that tokenizer."""
    INTERNAL = "internal"
    """Anything else: a request the worker cannot read, or vLLM raising on a completion."""


class ErrorAnswer(TypedDict):
    error: str
    """The reason, on one line."""
    kind: ErrorKind


class HelloAnswer(TypedDict):
    vllm: str
    import_seconds: float


class NamesAnswer(TypedDict):
    tool: list[str]
    reasoning: list[str]


class ModelRequest(TypedDict):
    """What every request about an opened model carries beside its own fields: the operation, the model's key (its
    files' digest) and the parser pair it was opened with."""

    op: Op
    model: str
    tool: str | None
    reasoning: str | None


class OpenBody(TypedDict, total=False):
    files: dict[str, str]
    """The folder's files (name -> path)."""
    inline: dict[str, str]
    """A stand-in vocabulary's files (name -> text), which win over a file of the same name."""


class OpenRequest(ModelRequest, OpenBody):
    pass


class OpenAnswer(TypedDict, total=False):
    tokenizer: str
    """The class vLLM loaded the tokenizer as."""
    harmony: bool
    """Whether vLLM runs the model's parsers as harmony (``gpt_oss``)."""
    mode: str
    """vLLM's tokenizer mode for the folder."""
    keeps_special_tokens: bool
    """Whether, with tools declared, the hand-over keeps special tokens (present when a parser pair was named)."""


class HandOverBody(TypedDict):
    ids: list[int]
    """The sampled ids, the stop token included."""
    prompt_ids: list[int]
    stopped: bool
    """Whether generation ended on the stop token (the detokenizer leaves it out then)."""
    tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any]


class HandOverRequest(ModelRequest, HandOverBody):
    pass


class HandOverAnswer(TypedDict):
    text: str
    skip_special_tokens: bool


class ParseBody(TypedDict):
    text: str
    ids: list[int]
    prompt_ids: list[int]
    tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any]
    earlier_calls: int
    """Tool calls earlier in the conversation (parsers that number call ids count on from there)."""


class ParseRequest(ModelRequest, ParseBody):
    pass


class ParsedCall(TypedDict):
    id: str
    name: str
    arguments: str


class ParseAnswer(TypedDict):
    reasoning: str | None
    content: str | None
    tool_calls: list[ParsedCall]


class RenderBody(TypedDict):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any]
    prefixes: list[tuple[int, bool]]
    """Each ``(k, add_generation_prompt)``: render ``messages[:k]``."""


class RenderRequest(ModelRequest, RenderBody):
    pass


class RenderAnswer(TypedDict):
    texts: list[str | None]
    errors: list[str | None]
    """Per prefix, the one-line reason vLLM's renderer refused it, or None."""


def hello() -> dict[str, Any]:
    """The request a worker is sent as soon as it starts."""
    return {"op": Op.HELLO}


def error(message: str, kind: ErrorKind) -> ErrorAnswer:
    return {"error": message, "kind": kind}


def is_error(answer: object) -> TypeGuard[ErrorAnswer]:
    return isinstance(answer, dict) and "error" in answer


def error_kind(answer: ErrorAnswer) -> ErrorKind:
    """The answer's kind; one the client does not know is internal."""
    try:
        return ErrorKind(answer.get("kind"))
    except ValueError:
        return ErrorKind.INTERNAL


def encode(message: object) -> bytes:
    """``message`` as it travels: its length, then its JSON."""
    data = json.dumps(message, ensure_ascii=False).encode("utf-8")
    return HEADER.pack(len(data)) + data


def decode(data: bytes) -> Any:
    """A message's JSON (the bytes after its length)."""
    return json.loads(data)


def read_message(stream: BinaryIO) -> Any | None:
    """The next message on ``stream``, or None once it has closed (a blocking read: the worker's side)."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    return decode(stream.read(size))


def write_message(stream: BinaryIO, message: object) -> None:
    stream.write(encode(message))
    stream.flush()
