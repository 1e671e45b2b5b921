"""vLLM's tool-call and reasoning parsers, by name, as vLLM 0.33's OpenAI server runs them on a finished completion.

They run in a worker process of their own (:mod:`tito_audit.parse.vllm_worker` inside it,
:mod:`tito_audit.parse.vllm_process` starting and asking it), never in tito-audit's: importing
any vLLM module imports torch, and with torch importable transformers reports it available and takes other code
paths, so a verdict would depend on whether vLLM is installed; vLLM's metadata also pins transformers and fastapi
below ours. ``make vllm`` installs vLLM, CPU torch and what they import into ``.venv/vllm-engine``, a folder only the
worker puts on its path, after this environment's own packages (docs/vllm.md: the measured costs). Where vLLM is
importable in this environment itself (a user who serves with vLLM), the worker uses that.

What the adapter does with a completion, and so what vLLM's server does (the worker's docstring cites the files):

1. the hand-over (:meth:`VLLMParser.hand_over`): the sampled ids decoded by vLLM's own detokenizer with the settings
   the request ends up with once the parser adjusted it (``skip_special_tokens`` off for the parsers that read
   special tokens when tools are declared, else on), the stop token left out of the text (it stays in the ids);
2. the parse (:meth:`VLLMParser.parse`): vLLM's composed parser (harmony for gpt-oss) on that text and the sampled
   ids, with the prompt's ids, the request's tools and template keyword arguments (``enable_thinking``) and the
   calls earlier in the conversation; the message's fields picked as the server picks them;
3. call ids in the form vLLM writes them (``chatcmpl-tool-`` and 16 hex digits, 9 letters and digits for Mistral's
   parser, ``functions.NAME:N`` for Kimi's), with the random part derived from the completion instead of drawn, so
   that reports are reproducible;
4. the message returned is the one the next render sees: each call's ``arguments`` turned back into an object
   (vLLM's renderer turns a string that is not a JSON object into ``{}``), a ``null`` content into ``""``.

A template-only model has no vocabulary. Its parsers run on the stand-in tokenizer the audit renders it with
(:mod:`tito_audit.model.standin`: byte-level, knowing the special tokens of the model's configs and template), sent
to the worker with the request, where every parser of the pair is one of :data:`STANDIN_PARSERS` (read in vLLM
0.33's code, they take no more from the tokenizer than the ids of the special tokens their format writes, looked up
by text, and the decoding of the sampled ids, which the stand-in gives for the same text) and where vLLM's hand-over
keeps special tokens for a request that declares tools (where it skips them, what the parser is handed depends on
which tokens the real vocabulary marks special, which a stand-in only guesses: ``deepseek_v31``'s, for one). The
verdict is then a text-level one, and the parser's name says so (``vllm hermes on a stand-in vocabulary``).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.errors import BadInputError
from tito_audit.model.standin import has_vocabulary
from tito_audit.model.threads import first_import
from tito_audit.parse.handover import Sampled, parse_input
from tito_audit.parse.interface import Engine, distribution_version
from tito_audit.parse.parser import ParseInput, ParserNeedsTokenizer, ParserRefused, ParserUnavailable
from tito_audit.parse.vllm_messages import (
    ErrorKind,
    HandOverAnswer,
    HandOverBody,
    NamesAnswer,
    Op,
    ParseAnswer,
    ParseBody,
)
from tito_audit.parse.vllm_process import (
    INSTALL,
    VERSION,
    OpenedModel,
    WorkerError,
    WorkerProcess,
    available,
    engine_folder,
    model_files,
    prestart,
    shutdown,
    tokenizer_mode,
    worker,
    worker_environment,
)

__all__ = [
    "ENGINE",
    "INSTALL",
    "VERSION",
    "VLLMEngine",
    "VLLMParser",
    "available",
    "check_names",
    "engine_folder",
    "json_safe",
    "model_files",
    "reasoning_parser_names",
    "rendered_arguments",
    "shutdown",
    "stable_call_id",
    "standin_files",
    "tokenizer_mode",
    "tool_parser_names",
    "worker",
    "worker_environment",
]

ENGINE = "vllm"

STANDIN_PARSERS: dict[str, str] = {
    # tool-call parsers
    "apertus": "",
    "cohere_command3": "",
    "cohere_command4": "",
    "deepseek_v31": "",
    "gigachat3": "",
    "glm45": "",
    "glm47": "",
    "granite": "",
    "granite4": "",
    "hermes": "",
    "hunyuan_a13b": "",
    "kimi_k2": "",
    "lfm2": "",
    "minimax_m2": "",
    "mistral": "Transformers format",
    "muse_glimmer": "",
    "qwen3_coder": "",
    "qwen3_xml": "",
    "seed_oss": "",
    "step3p5": "",
    # reasoning parsers (cohere_command3/4, glm45, kimi_k2, minimax_m2, mistral, step3p5, hunyuan_a13b and
    # muse_glimmer name one too)
    "deepseek_r1": "",
    "deepseek_v3": "",
    "nemotron_v3": "",
    "qwen3": "",
}
"""vLLM 0.33 parsers that read no more of the tokenizer than the ids of their format's special tokens, looked up by
text (``vocab.get("<tool_call>")``), and the decoding of the sampled ids: they run on a template-only model's
stand-in vocabulary. Each maps to what the row says beside the stand-in, where the parser's path depends on the
serving configuration: ``mistral`` takes another path with mistral-common's tokenizer (its version, its grammar)
than with a Hugging Face one, and only the latter reads the chat template audited here (vLLM's documented
Transformers format, ``--tokenizer-mode hf``). The Cohere pair (``cohere_command3``/``cohere_command4``,
``parser/cohere_command.py``) looks up ``<|START_THINKING|>``, ``<|END_THINKING|>`` and ``<|CHATBOT_TOKEN|>`` by text
and hands the decoded text to the ``cohere_melody`` package, which reads the Command format's tags in it. Not among
them: harmony's (``openai``, ``openai_gptoss``), which read ids in the o200k encoding themselves, and any parser not
read yet."""
STANDIN = " on a stand-in vocabulary"
"""What a parser's name says when it ran on a stand-in vocabulary (``vllm hermes on a stand-in vocabulary``)."""
LINKED_WITH_STANDIN = ("config.json", "generation_config.json")
"""The files of a template-only folder the worker is given beside the stand-in vocabulary's own."""


@cache
def _names() -> NamesAnswer:
    running, _ = worker()
    answer: NamesAnswer = running.ask({"op": Op.NAMES})
    return answer


def tool_parser_names() -> list[str]:
    """The tool-call parser names vLLM registers (raises :class:`ParserUnavailable` when vLLM is not installed)."""
    return list(_names()["tool"])


def reasoning_parser_names() -> list[str]:
    return list(_names()["reasoning"])


def check_names(tool: str | None, reasoning: str | None) -> None:
    """Refuse parser names vLLM does not register (:class:`BadInputError` naming ``--parser`` and the known names)."""
    for kind, name, known in (
        ("tool-call", tool, tool_parser_names()),
        ("reasoning", reasoning, reasoning_parser_names()),
    ):
        if name is not None and name not in known:
            raise BadInputError(f"--parser: unknown vLLM {kind} parser {name!r} (known: {', '.join(known)})")


class VLLMParser:
    """One vLLM tool-call parser and, optionally, one reasoning parser, for one model's tokenizer."""

    engine = ENGINE
    runs_apart = True
    """Its parse runs in vLLM's worker process: nothing of the model this process holds is read while it waits, so a
    session does not hold the model's lock through it (a stalled worker would stall every session of the model)."""

    def __init__(self, tool: str | None, reasoning: str | None, model_dir: Path | None, tokenizer: Any = None) -> None:
        """``tokenizer``: the tokenizer the audit renders with, sent to the worker when the folder has no vocabulary
        (a template-only model's stand-in) and the pair's parsers read no more than its special tokens."""
        if tool is None and reasoning is None:
            raise BadInputError("--parser vllm: name a tool-call parser, a reasoning parser or both")
        self.tool = tool
        self.reasoning = reasoning
        self.name = "vllm " + "+".join(part for part in (tool or "no tool parser", reasoning) if part)
        check_names(tool, reasoning)
        if model_dir is None:
            raise ParserNeedsTokenizer(f"--parser {self.name}: vLLM's parsers need the model's folder (its tokenizer)")
        self.model_dir = Path(model_dir)
        files, inline = model_files(self.model_dir), None
        if not has_vocabulary(files):
            inline = self._standin(tokenizer)
            files = {name: path for name, path in files.items() if name in LINKED_WITH_STANDIN}
            formats = sorted({STANDIN_PARSERS[name] for name in (tool, reasoning) if name and STANDIN_PARSERS[name]})
            self.name += STANDIN + (f" ({', '.join(formats)})" if formats else "")
        self._model = OpenedModel(files, inline, tool, reasoning)
        self.harmony = False
        self._open()
        if inline is not None and not self._model.opened.get("keeps_special_tokens"):
            why = (
                "with tools declared, vLLM's hand-over for these parsers skips special tokens, and which tokens are "
                "special is the vocabulary's, which a stand-in only guesses"
            )
            raise self._needs_tokenizer(why)

    def _standin(self, tokenizer: Any) -> dict[str, str]:
        """The files of the stand-in vocabulary (name -> text) for a folder without one, or
        :class:`ParserNeedsTokenizer` when a parser of the pair reads more of the tokenizer than it knows."""
        beyond = [name for name in (self.tool, self.reasoning) if name is not None and name not in STANDIN_PARSERS]
        if tokenizer is None or beyond:
            why = (
                f"{', '.join(beyond)} reads more of it than the special tokens a stand-in vocabulary knows"
                if beyond
                else "no stand-in vocabulary was given"
            )
            raise self._needs_tokenizer(why)
        return standin_files(tokenizer)

    def _needs_tokenizer(self, why: str) -> ParserNeedsTokenizer:
        return ParserNeedsTokenizer(
            f"--parser {self.name}: vLLM's parsers read the model's tokenizer, and this folder has none (a "
            f"template-only model, audited at text level; {why})",
            why,
        )

    def _open(self) -> WorkerProcess:
        """The worker with this parser's model opened in it (the error it refused with, as this parser's own)."""
        try:
            running = self._model.open()
        except WorkerError as exc:
            if exc.kind is ErrorKind.IMPORT:
                raise ParserUnavailable(f"--parser {self.name}: {exc}") from None
            if exc.kind in (ErrorKind.TOKENIZER, ErrorKind.PARSER):
                raise ParserRefused(f"--parser {self.name}: {exc}") from None
            raise BadInputError(f"--parser {self.name}: {exc}") from None
        self.harmony = bool(self._model.opened.get("harmony"))
        return running

    def _ask(self, op: Op, body: HandOverBody | ParseBody) -> Any:
        running = self._open()
        try:
            return self._model.ask(running, op, body)
        except WorkerError as exc:
            raise BadInputError(f"--parser {self.name}: vLLM's parser raised on a completion: {exc}") from None

    def hand_over(self, sampled: Sampled) -> ParseInput:
        """What vLLM's engine hands its parser for ``sampled`` (the module docstring, step 1); without ids (a caller
        with text only), the text with its stop token trimmed."""
        if not sampled.ids:
            text = sampled.text[: -len(sampled.stop)] if sampled.stopped and sampled.stop else sampled.text
            return parse_input(sampled, text)
        body = HandOverBody(
            ids=list(sampled.ids),
            prompt_ids=list(sampled.prompt_ids),
            stopped=sampled.stopped,
            tools=sampled.tools,
            template_kwargs=json_safe(sampled.template_kwargs),
        )
        answer: HandOverAnswer = self._ask(Op.HAND_OVER, body)
        return parse_input(sampled, str(answer["text"]))

    def parse(self, given: ParseInput) -> Message:
        body = ParseBody(
            text=given.text,
            ids=list(given.ids),
            prompt_ids=list(given.prompt_ids),
            tools=given.tools,
            template_kwargs=json_safe(given.template_kwargs),
            earlier_calls=given.earlier_calls,
        )
        answer: ParseAnswer = self._ask(Op.PARSE, body)
        message: Message = {"role": ASSISTANT, "content": answer.get("content") or ""}
        if answer.get("reasoning"):
            message["reasoning_content"] = answer["reasoning"]
        calls = answer.get("tool_calls") or []
        if calls:
            message["tool_calls"] = [
                {
                    "id": stable_call_id(str(call.get("id") or ""), f"{given.call_id_seed}:{index}:{call['name']}"),
                    "type": "function",
                    "function": {"name": call["name"], "arguments": rendered_arguments(call.get("arguments"))},
                }
                for index, call in enumerate(calls)
            ]
        return message


RANDOM_IDS = (
    (re.compile(r"^(chatcmpl-tool-)([0-9a-f]{16})$"), "0123456789abcdef"),
    (re.compile(r"^(call_(?:\d+_)?)([0-9a-f]{16})$"), "0123456789abcdef"),
    (re.compile(r"^()([A-Za-z0-9]{9})$"), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
)
"""The call ids vLLM draws at random (``renderers/chat_utils/tool_call.py`` ``make_tool_call_id``, the parsers that
write ``call_`` ids, ``parser/mistral.py`` ``MistralToolCall.generate_random_id``): their fixed part, and the
alphabet of their random part."""


def stable_call_id(drawn: str, seed: str) -> str:
    """``drawn`` with its random part derived from ``seed`` instead (ids a parser reads from the text, Kimi's
    ``functions.NAME:N``, stay as they are).

    >>> stable_call_id("chatcmpl-tool-0123456789abcdef", "a") == stable_call_id("chatcmpl-tool-fedcba9876543210", "a")
    True
    >>> stable_call_id("functions.ls:0", "a")
    'functions.ls:0'
    """
    for pattern, alphabet in RANDOM_IDS:
        match = pattern.match(drawn)
        if match:
            digest = hashlib.sha256(seed.encode()).digest()
            random_part = "".join(alphabet[byte % len(alphabet)] for byte in digest[: len(match.group(2))])
            return match.group(1) + random_part
    return drawn


def rendered_arguments(raw: Any) -> Any:
    """A call's arguments as vLLM's renderer hands them to the template (``renderers/chat_utils/chat_message.py``
    ``_postprocess_messages``): a JSON object string as the object, anything else (not JSON, not an object, empty) as
    ``{}``."""
    if isinstance(raw, dict):
        return raw
    if not raw or not isinstance(raw, str):
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def standin_files(tokenizer: Any) -> dict[str, str]:
    """A stand-in tokenizer's files as ``save_pretrained`` writes them (name -> text), for the worker to load as
    vLLM loads a folder."""
    with tempfile.TemporaryDirectory(prefix="tito-audit-standin-") as tmp, first_import():
        tokenizer.save_pretrained(tmp)
        return {path.name: path.read_text(encoding="utf-8") for path in sorted(Path(tmp).iterdir()) if path.is_file()}


def json_safe(values: Any) -> Any:
    """Template keyword arguments (or messages) as JSON carries them (a value JSON cannot carry goes as its text)."""
    return json.loads(json.dumps(values, default=str))


class VLLMEngine(Engine):
    """vLLM's parsers, run in vLLM's worker process (:mod:`tito_audit.parse.vllm_process`)."""

    name = ENGINE
    label = "vLLM"
    module = "vllm"
    install = INSTALL

    def build(self, tool: str | None, reasoning: str | None, tokenizer: Any, model_dir: Path | None) -> VLLMParser:
        return VLLMParser(tool, reasoning, model_dir, tokenizer)

    def check(self, tool: str | None, reasoning: str | None) -> None:
        check_names(tool, reasoning)

    def available(self) -> bool:
        return available()

    def installed(self) -> bool:
        return available()

    def version(self) -> str | None:
        return distribution_version("vllm", engine_folder())

    def start_ahead(self) -> None:
        prestart()
