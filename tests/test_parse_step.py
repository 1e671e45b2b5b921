"""The parse step (docs/contract.md "The parse step"): small parsers of our own between each completion and the next
prompt.

The template is the tests' ChatML-like skeleton (``<think>R</think>`` then content then ``<tool_call>NAME ARGS``);
the parsers below read that format back, each with one defect. The rollout with a parser must give the defect its
own label (``parse-lossy``) and field, decide the verdict with the parser from it, and leave template causes to the
template: the control is the same step with the template's own message.
"""

from __future__ import annotations

import json
import re

import pytest

from tests import templates
from tests.helpers import load
from tests.test_cli import run_cli
from tito_audit.audit.results import BROKEN, READY
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.errors import BadInputError
from tito_audit.formatters.json_report import report_to_dict
from tito_audit.parse.fields import (
    ARGUMENTS_RESERIALIZED,
    CALL_LOST,
    CONTENT_WHITESPACE,
    REASONING_BOUNDARY,
    changed_fields,
)
from tito_audit.parse.parser import ParseInput

CALL = re.compile(r"<tool_call>(\S+) (.*?)</tool_call>", re.S)
THINK = re.compile(r"<think>(.*?)</think>", re.S)


class ToyParser:
    """Reads the skeleton's assistant turn back. Defects: ``strip`` trims content, ``newline`` keeps the separator
    newline inside the reasoning, ``reserialize`` writes arguments back as compact JSON, ``as_object`` returns them
    as objects (the template then writes its own layout), ``lose_calls`` finds no call, ``calls_as_text`` finds no
    call and gives its text back as content (as SGLang does with a call its detector does not recognise),
    ``prose_newline`` keeps a newline after the text before a call (as vLLM's hermes keeps the one before
    ``<tool_call>``), ``coerce`` reads a top-level whole-valued float back as an integer (as vLLM's schema coercion
    does for ``number``)."""

    def __init__(self, name: str = "toy", **defects: bool) -> None:
        self.name = name
        self.defects = defects

    def parse(self, given: ParseInput) -> dict:
        text = given.text
        calls_start, calls = len(text), []
        for found in reversed(list(CALL.finditer(text))):  # the calls are the turn's tail, after its content
            if found.end() != calls_start:
                break
            calls_start = found.start()
            calls.insert(0, found)
        body, reasoning = text[:calls_start], None
        if body.startswith("<think>") and "</think>" in body:
            end = body.rfind("</think>")
            reasoning, body = body[len("<think>") : end], body[end + len("</think>") :]
        if self.defects.get("calls_as_text"):  # the calls not found: their text stays in the content
            body, calls = body + text[calls_start:], []
        if self.defects.get("prose_newline") and calls and body.strip():
            body += "\n"
        message: dict = {"role": "assistant", "content": body.strip() if self.defects.get("strip") else body}
        if reasoning is not None:
            message["reasoning_content"] = reasoning + ("\n" if self.defects.get("newline") else "")
        if calls and not self.defects.get("lose_calls"):
            message["tool_calls"] = [self._call(index, found) for index, found in enumerate(calls)]
        return message

    def _call(self, index: int, found: re.Match) -> dict:
        arguments: object = found.group(2)
        if self.defects.get("reserialize"):
            arguments = json.dumps(json.loads(found.group(2)), separators=(",", ":"))
        elif self.defects.get("as_object"):
            arguments = json.loads(found.group(2))
        elif self.defects.get("coerce"):
            values = json.loads(found.group(2))
            whole = {k: int(v) for k, v in values.items() if isinstance(v, float) and v.is_integer()}
            arguments = json.dumps({**values, **whole}, ensure_ascii=False)
        return {"id": f"t{index}", "type": "function", "function": {"name": found.group(1), "arguments": arguments}}


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("parse-step")
    loaded = {}
    for name in ("GOOD", "CONTENT_TRIMMED_IN_HISTORY"):
        path = folder / f"{name}.jinja"
        path.write_text(getattr(templates, name), encoding="utf-8")
        loaded[name] = load(tiny_model_dir, path)
    return loaded


def _audit(model, parser, count: int = 48):
    return audit(model, AuditOptions(count=count, parser=parser))


def test_lossless_parser_changes_nothing(models):
    report = _audit(models["GOOD"], ToyParser())
    (parse,) = report.variants[0].parses
    assert report.verdict == READY and [v.verdict for v in report.parsers] == [READY]
    assert parse is not None and parse.turns_parsed > 50
    assert parse.check.failed == 0 and not parse.failures
    assert "parse-lossy" not in parse.check.cause_counts


@pytest.mark.parametrize(
    ("defect", "field"),
    [("strip", CONTENT_WHITESPACE), ("newline", REASONING_BOUNDARY), ("reserialize", ARGUMENTS_RESERIALIZED)],
)
def test_each_defect_is_parse_lossy_with_its_field(models, defect, field):
    report = _audit(models["GOOD"], ToyParser(**{defect: True}))
    (parse,) = report.variants[0].parses
    assert report.verdict == READY, "the template's own verdict does not move"
    assert [v.verdict for v in report.parsers] == [BROKEN]
    assert set(parse.check.cause_counts) == {"parse-lossy"}
    assert parse.fields.get(field, 0) > 0
    failure = parse.failures[0]
    assert failure.causes == ["parse-lossy"] and field in failure.detail
    assert failure.message_role == "assistant" and failure.message_index is not None
    assert failure.expected_text != failure.actual_text


def test_a_lost_call_is_named(models):
    (parse,) = _audit(models["GOOD"], ToyParser(lose_calls=True)).variants[0].parses
    assert parse.fields.get(CALL_LOST, 0) > 0


def test_the_control_keeps_template_causes_apart(models):
    """A template that trims an assistant message's content once another message follows it fails with its own
    cause whatever the parser: every step the template's own message fails keeps content-rewritten with a lossless
    parser and with one that strips too; parse-lossy only where the template's own message holds."""
    plain = _audit(models["CONTENT_TRIMMED_IN_HISTORY"], "template").variants[0]
    failing = {(f.conversation_id, f.turn) for f in plain.failures if f.check == "rollout" and f.aspect == "text"}
    assert failing
    for parser in (ToyParser(), ToyParser(strip=True)):
        (parse,) = _audit(models["CONTENT_TRIMMED_IN_HISTORY"], parser).variants[0].parses
        template_failures = [f for f in parse.failures if f.causes != ["parse-lossy"]]
        # conversations giving arguments as JSON strings are left out of the rollout with a parser
        assert template_failures and {(f.conversation_id, f.turn) for f in template_failures} <= failing
        assert all("content-rewritten" in f.causes for f in template_failures)
        lossy = {(f.conversation_id, f.turn) for f in parse.failures if f.causes == ["parse-lossy"]}
        assert not lossy & failing
        if not parser.defects:
            assert not lossy


def test_written_layouts_are_rates_beside_the_verdict(models):
    """Compact JSON written by the model: a parser that gives the text back keeps it; one that returns objects lets
    the template re-serialize them. Either way the verdict does not move."""
    (kept,) = _audit(models["GOOD"], ToyParser()).variants[0].parses
    (rewritten,) = _audit(models["GOOD"], ToyParser(as_object=True)).variants[0].parses
    compact = {w.layout: w for w in kept.written}["compact JSON arguments"]
    assert compact.steps > 0 and compact.differing == 0
    redone = {w.layout: w for w in rewritten.written}["compact JSON arguments"]
    assert redone.steps > 0 and redone.differing == redone.steps
    assert kept.verdict == READY


def test_template_parser_gives_the_verdicts_of_no_parser(models):
    plain = report_to_dict(audit(models["GOOD"], AuditOptions(count=24)))
    explicit = report_to_dict(audit(models["GOOD"], AuditOptions(count=24, parser="template")))
    for report in (plain, explicit):
        report.pop("generated_at"), report.pop("duration_seconds")
    assert plain == explicit
    assert explicit["parsers"] == [] and all(v["parses"] == [] for v in explicit["variants"])


def test_changed_fields():
    message = {
        "role": "assistant",
        "content": "Hi",
        "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    assert changed_fields(message, message) == []
    assert changed_fields(message, {**message, "content": " Hi\n"}) == [CONTENT_WHITESPACE]
    compact = {**message, "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x":1}'}}]}
    assert changed_fields(message, compact) == [ARGUMENTS_RESERIALIZED]
    assert CALL_LOST in changed_fields(message, {"role": "assistant", "content": "Hi"})
    thought = {"role": "assistant", "content": "Hi", "reasoning_content": "hidden"}
    assert changed_fields(thought, {"role": "assistant", "content": "Hi"}, written="Hi") == []
    assert changed_fields(thought, {"role": "assistant", "content": "Hi"}, written="<think>hidden</think>Hi") == [
        REASONING_BOUNDARY
    ]


class Raises:
    name = "raises"

    def parse(self, given):
        raise RuntimeError("boom")


def test_a_parser_that_raises_is_bad_input(models):
    with pytest.raises(BadInputError, match="--parser raises: the parser raised on a completion: RuntimeError: boom"):
        _audit(models["GOOD"], Raises(), count=4)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nonsense", "unknown SGLang tool-call parser 'nonsense'"),
        ("qwen25,nonsense", "unknown SGLang reasoning parser 'nonsense'"),
        ("hf", "the tokenizer ships no response_template"),
        ("sglang", "no SGLang parser pair is recorded"),
    ],
)
def test_bad_parser_values_are_one_line_exit_2(tiny_model_dir, tmp_path, value, message):
    pytest.importorskip("llm_router_utils", reason="SGLang's parsers (the sglang extra) are not installed")
    template = tmp_path / "good.jinja"
    template.write_text(templates.GOOD, encoding="utf-8")
    result = run_cli(
        "audit", str(tiny_model_dir), "--template", str(template), "-n", "2", "--parser", value, "--no-hub"
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1


def test_a_missing_extra_names_what_to_install(monkeypatch, models):
    from tito_audit.parse import sglang

    monkeypatch.setattr(sglang, "_modules", _missing)
    with pytest.raises(BadInputError, match=r"pip install --no-deps llm-router-utils"):
        _audit(models["GOOD"], "qwen25", count=2)
    report = audit(models["GOOD"], AuditOptions(count=2, parser="auto"))
    assert report.parsers == []


def _missing():
    raise sglang_unavailable()


def sglang_unavailable():
    from tito_audit.parse.parser import ParserUnavailable
    from tito_audit.parse.sglang import INSTALL

    return ParserUnavailable(
        f"--parser: SGLang's parsers are not installed (llm_router_utils); install them with: {INSTALL}"
    )


def test_every_lossy_turn_is_seen_even_without_calls(models):
    """Two answers in a row that the parser strips, each followed by a user turn: both steps break (the prompt of
    the second is rendered from the parsed history as it is then, not as it was at the first). The generated
    conversations come first, so that the renderer's fast path is past its first checks against transformers."""
    from tito_audit.conversations.conversation import Conversation

    messages = [
        {"role": "user", "content": "Hi there."},
        {"role": "assistant", "content": "  First answer.  "},
        {"role": "user", "content": "And then?"},
        {"role": "assistant", "content": "  Second answer.  "},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "Bye."},
    ]
    options = AuditOptions(
        count=24, conversations=[Conversation("strip", messages)], with_generated=True, parser=ToyParser(strip=True)
    )
    (parse,) = audit(models["GOOD"], options).variants[0].parses
    ours = [(f.turn, f.causes) for f in parse.failures if f.conversation_id == "strip"]
    assert ours == [(3, ["parse-lossy"]), (5, ["parse-lossy"])]


def test_the_parsed_history_is_rendered_as_it_is_now(models):
    """The walk replaces messages of its history list in place; the renderer keeps a conversation's preparation by
    the list's identity. Each render of the parsed history must see the history as it is at that step, also once
    the renderer's direct path no longer checks itself against transformers."""
    from types import SimpleNamespace

    from tito_audit.audit.parse_step.parsed_turns import render_next as _render
    from tito_audit.model.load_folder import codec_for
    from tito_audit.model.render import Renderer

    model = models["GOOD"]
    renderer = Renderer(model, codec_for(model))
    assert renderer._fast is not None
    renderer._fast.VERIFY_FIRST, renderer._fast.VERIFY_EVERY = 0, 10**9  # past its checks, as late in an audit
    context = SimpleNamespace(setup=SimpleNamespace(renderer=renderer), conversation=SimpleNamespace(tools=None))
    history = [
        {"role": "user", "content": "Hi there."},
        {"role": "assistant", "content": "  First answer.  "},
        {"role": "user", "content": "And then?"},
    ]
    assert "  First answer.  " in _render(context, history, 3).text
    history[1] = {"role": "assistant", "content": "First answer."}  # the parsed message, as the walk puts it
    now = _render(context, history, 3).text
    assert "  First answer.  " not in now and "First answer." in now
