"""vLLM's GPU-less renderer as a reference, run for real: ``vllm launch render`` on a model's folder, asked for the
prompt ids of the audit's conversations (``POST /v1/chat/completions/render``) and for the message it makes of the
audit's drawn completions (``POST /v1/chat/completions/derender``), each compared with ours.

A trainer behind vLLM gets vLLM's prompt ids, not transformers': a render that differs is a finding (which
conversation, where, the tokens on each side). The derender runs vLLM's parsers on the completion's ids through vLLM's
own server code; it is compared with what ``--parser vllm`` (:class:`tito_audit.parse.vllm.VLLMParser`) made of the
same ids during the audit. One difference is known from vLLM's code: with a parser configured, the derender keeps
special tokens in the text (``renderers/online_derenderer.py``, ``_decode_params(preserve_special=True)``), where the
chat completions endpoint skips them unless the parser's ``adjust_request`` turns that off; the audit follows the
chat completions endpoint.

The server is started and stopped here (127.0.0.1, a free port, the CPU platform, offline; its files are a folder of
links to the model's), one per model. ``make vllm-renderer`` compares every token-level model of
``../shared/tokenizers``; ``python -m tito_audit.audit.vllm_reference MODEL...`` some.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.audit.parse_step.parsed_turns import openai_tools
from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.conversations.generate import generate
from tito_audit.errors import AuditError
from tito_audit.model.load_by_id import load_by_id
from tito_audit.model.load_folder import LoadedModel, codec_for
from tito_audit.model.registry import registry_parsers
from tito_audit.model.render import Renderer, RenderError
from tito_audit.model.tokens import TokenCodec
from tito_audit.parse import vllm
from tito_audit.parse.handover import Sampled
from tito_audit.parse.parser import ParseInput

LAUNCH = (
    "import sys\n"
    "from vllm.entrypoints.cli.main import main\n"
    "sys.argv = ['vllm', 'launch', 'render', *sys.argv[1:]]\n"
    "main()\n"
)
START_SECONDS = 600.0
"""How long the server may take to answer (about 25 s alone on 2 cores)."""


class ServerError(Exception):
    """The render server did not start (the reason is its last words)."""


class RenderServer:
    """``vllm launch render`` on one model's folder, for the duration of a ``with`` block."""

    def __init__(self, model_dir: Path, tool: str | None = None, reasoning: str | None = None) -> None:
        self.model_dir = model_dir
        self.tool = tool
        self.flags = ["--enable-auto-tool-choice", "--tool-call-parser", tool] if tool else []
        self.flags += ["--reasoning-parser", reasoning] if reasoning else []
        self.start_seconds = 0.0
        self._folder = tempfile.TemporaryDirectory(prefix="tito-audit-vllm-render-")
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (the server's output, kept while it runs)
        self.process: subprocess.Popen | None = None
        self.port = 0

    def __enter__(self) -> RenderServer:
        root = Path(self._folder.name) / "model"
        for name, target in vllm.model_files(self.model_dir).items():
            link = root / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        args = [str(root), "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", "model"]
        args += ["--tokenizer-mode", vllm.tokenizer_mode(vllm.model_files(self.model_dir))]
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, *args, *self.flags],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=vllm.worker_environment(),
            start_new_session=True,
            preexec_fn=_end_with_parent,
        )
        try:
            self._wait(started + START_SECONDS)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.start_seconds = time.perf_counter() - started
        return self

    def _wait(self, deadline: float) -> None:
        assert self.process is not None
        while time.perf_counter() < deadline:
            if self.process.poll() is not None:
                raise ServerError(self.last_words())
            health = f"http://127.0.0.1:{self.port}/health"
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(health, timeout=5) as answer,
            ):
                if answer.status == 200:
                    return
            time.sleep(1.0)
        raise ServerError(f"no answer within {START_SECONDS:.0f} s")

    def last_words(self) -> str:
        """The server's last error (the line naming it and the one after: pydantic's says what it refused there)."""
        self._log.seek(0)
        lines = [line.strip() for line in self._log.read().decode("utf-8", "replace").splitlines() if line.strip()]
        named = [n for n, line in enumerate(lines) if re.search(r"\b\w*(Error|Exception):", line)]
        if not named:
            return (lines or ["it ended without a word"])[-1][-400:]
        return " ".join(lines[named[-1] : named[-1] + 3])[-400:]

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
        self._folder.cleanup()

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return {"error": exc.read().decode("utf-8", "replace")[:400]}


def _end_with_parent() -> None:
    """In the server's process before it starts: Linux ends it when the process that started it ends (a test run
    that is killed leaves no server behind)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Difference:
    where: str
    ours: str
    theirs: str


@dataclass
class Comparison:
    """One model against vLLM's renderer."""

    model_id: str
    parser: str = ""
    skipped: str = ""
    """Why the model could not be compared (empty when it was)."""
    renders: list[int] = field(default_factory=lambda: [0, 0])
    """[prompts whose ids equal ours, prompts compared]."""
    derenders: list[int] = field(default_factory=lambda: [0, 0])
    """[completions whose message equals ours, completions compared]."""
    differences: list[Difference] = field(default_factory=list)
    start_seconds: float = 0.0


def vllm_message(message: Message) -> Message:
    """``message`` as an OpenAI client sends it to vLLM: each call's arguments a JSON string (the request schema
    wants one), the reasoning under ``reasoning``, the name vLLM 0.33's responses use (a ``reasoning_content`` sent
    instead is renamed so by the request's validator, and the renderer hands the template both names:
    ``renderers/chat_utils/chat_message.py``)."""
    out = dict(message)
    if "reasoning_content" in out:
        out["reasoning"] = out.pop("reasoning_content")
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": _json_text(call["function"].get("arguments"))}}
            for call in out["tool_calls"]
        ]
    return out


def _json_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def as_vllm_renders(message: Message) -> Message:
    """``message`` as vLLM hands it to the template: each call's ``arguments`` an object (a JSON string parsed, as
    SGLang does too; anything else ``{}``: ``_postprocess_messages``). Our side renders this form, so that a
    difference is the renderer's, not the known arguments conversion."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    converted = [
        {
            **call,
            "function": {**call["function"], "arguments": vllm.rendered_arguments(call["function"].get("arguments"))},
        }
        if isinstance(call, dict) and isinstance(call.get("function"), dict)
        else call
        for call in calls
    ]
    return {**message, "tool_calls": converted}


def compare(loaded: LoadedModel, count: int = 4, seed: int = 0, keep: int = 6) -> Comparison:
    """``loaded`` against vLLM's renderer: ``count`` generated conversations' prompts, and the completions drawn by an
    audit of ``count`` conversations with ``--parser vllm`` (the model's documented pair), ``keep`` differences kept."""
    model_id = loaded.resolved.model_id
    pair = registry_parsers(model_id, engine=vllm.ENGINE)
    result = Comparison(model_id, f"vllm {pair.tool}+{pair.reasoning}" if pair else "")
    if loaded.tokenizer is None or loaded.text_level_only:
        result.skipped = "no tokenizer to serve"
        return result
    try:
        with RenderServer(loaded.resolved.path, *(pair.tool, pair.reasoning) if pair else ()) as server:
            result.start_seconds = server.start_seconds
            _compare_renders(server, loaded, count, seed, result, keep)
            if pair is not None:
                _compare_derenders(server, loaded, pair, count, seed, result, keep)
    except ServerError as exc:
        result.skipped = f"vLLM's renderer does not serve it: {exc}"
    return result


def _compare_renders(server: RenderServer, loaded: LoadedModel, count: int, seed: int, result: Comparison, keep: int):
    codec = codec_for(loaded)
    renderer = Renderer(loaded, codec)
    for conversation in generate(count, seed):
        messages, tools = [as_vllm_renders(m) for m in conversation.messages], openai_tools(conversation.tools)
        for k, message in enumerate(messages):
            if message.get("role") != ASSISTANT:
                continue
            try:
                ours = renderer.prefixes(messages, tools, [(k, True)])[(k, True)].ids
            except RenderError:
                continue
            body: dict[str, Any] = {"messages": [vllm_message(m) for m in messages[:k]]}
            if tools:  # in the prompt whatever tool_choice says; "auto" needs a tool-call parser on the server
                body.update(tools=tools, tool_choice="auto" if server.tool else "none")
            answer = server.post("/v1/chat/completions/render", body)
            theirs = answer.get("token_ids")
            result.renders[1] += 1
            if theirs == ours:
                result.renders[0] += 1
            elif len(result.differences) < keep:
                where = f"render {conversation.id} messages[:{k}]"
                result.differences.append(_token_difference(where, codec, ours, theirs, answer))


def _token_difference(where: str, codec: TokenCodec, ours: list[int], theirs: Any, answer: dict) -> Difference:
    if not isinstance(theirs, list):
        return Difference(where, "", f"no ids: {str(answer.get('error', answer))[:300]}")
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs)))
    return Difference(
        f"{where}, token {at} of {len(ours)} (theirs: {len(theirs)})",
        repr(codec.decode(ours[max(0, at - 8) : at + 8])),
        repr(codec.decode(theirs[max(0, at - 8) : at + 8])),
    )


class _Recording:
    """``--parser vllm`` with every completion it parses kept: what was handed over, and the message made of it."""

    def __init__(self, parser: vllm.VLLMParser) -> None:
        self.inner, self.name, self.engine, self.tool = parser, parser.name, parser.engine, parser.tool
        self.records: list[tuple[Sampled, Message]] = []
        self._sampled: Sampled | None = None

    def hand_over(self, sampled: Sampled) -> ParseInput:
        self._sampled = sampled
        return self.inner.hand_over(sampled)

    def parse(self, given: ParseInput) -> Message:
        message = self.inner.parse(given)
        if self._sampled is not None and self._sampled.ids:
            self.records.append((self._sampled, message))
        self._sampled = None
        return message


def _compare_derenders(server, loaded, pair, count: int, seed: int, result: Comparison, keep: int) -> None:
    from tito_audit.audit.service import AuditOptions, audit

    recording = _Recording(vllm.VLLMParser(pair.tool, pair.reasoning, loaded.resolved.path))
    audit(loaded, AuditOptions(count=count, seed=seed, parser=recording))
    for sampled, ours in recording.records:
        chat: dict[str, Any] = {"messages": [{"role": "user", "content": ""}], "model": "model"}
        if sampled.tools:
            chat["tools"] = sampled.tools
        if sampled.template_kwargs:
            chat["chat_template_kwargs"] = sampled.template_kwargs
        choice = {"index": 0, "token_ids": list(sampled.ids), "finish_reason": "stop" if sampled.stopped else "length"}
        body = {
            "generate_response": {"request_id": "tito-audit", "choices": [choice]},
            "prompt_token_ids": list(sampled.prompt_ids),
            "chat_request": chat,
        }
        answer = server.post("/v1/chat/completions/derender", body)
        theirs = _message(answer)
        result.derenders[1] += 1
        mine = _comparable(ours)
        if theirs == mine:
            result.derenders[0] += 1
        elif len(result.differences) < keep:
            where = f"derender of {sampled.text[:60]!r}"
            result.differences.append(Difference(where, json.dumps(mine), json.dumps(theirs)))


def _message(answer: dict[str, Any]) -> dict[str, Any]:
    try:
        message = answer["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return {"error": str(answer.get("error", answer))[:300]}
    calls = [
        [call["function"]["name"], vllm.rendered_arguments(call["function"].get("arguments"))]
        for call in message.get("tool_calls") or []
    ]
    return {"content": message.get("content") or "", "reasoning": message.get("reasoning") or "", "calls": calls}


def _comparable(message: Message) -> dict[str, Any]:
    calls = [[c["function"]["name"], c["function"]["arguments"]] for c in message.get("tool_calls") or []]
    return {
        "content": message.get("content") or "",
        "reasoning": message.get("reasoning_content") or "",
        "calls": calls,
    }


def report_lines(comparison: Comparison) -> list[str]:
    """The comparison of one model in a few lines."""
    if comparison.skipped:
        return [f"{comparison.model_id}: skipped ({comparison.skipped})"]
    (r_same, r_all), (d_same, d_all) = comparison.renders, comparison.derenders
    parser = comparison.parser or "no parser"
    lines = [
        f"{comparison.model_id}: render {r_same}/{r_all} prompts equal; derender with {parser} {d_same}/{d_all}"
        f" messages equal (server up in {comparison.start_seconds:.0f} s)"
    ]
    for difference in comparison.differences:
        lines += [
            f"  differs: {difference.where}",
            f"    ours:   {difference.ours}",
            f"    theirs: {difference.theirs}",
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", action="append", default=[], help="a folder of <org>--<name>/ model folders")
    parser.add_argument("-n", "--count", type=int, default=8, help="conversations per model")
    parser.add_argument("models", nargs="*", help="model ids (default: every model folder in the mirrors)")
    args = parser.parse_args(argv)
    mirrors = [Path(m) for m in args.mirror]
    models = args.models or sorted(
        folder.name.replace("--", "/", 1) for mirror in mirrors for folder in mirror.iterdir() if "--" in folder.name
    )
    if not vllm.available():
        print(f"error: vLLM is not installed; install it with: {vllm.INSTALL}", file=sys.stderr)
        return 2
    differing = 0
    for model_id in models:
        try:
            loaded = load_by_id(model_id, mirrors=mirrors, allow_hub=False)
        except AuditError as exc:
            print(f"{model_id}: skipped ({exc})", flush=True)
            continue
        comparison = compare(loaded, args.count)
        differing += bool(comparison.differences)
        print("\n".join(report_lines(comparison)), flush=True)
    print(f"{differing} of {len(models)} models differ from vLLM's renderer somewhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())
