"""Integration tests over the real tokenizers in ../shared/tokenizers (skipped when absent).

They check the verdicts the tool derives against public facts, that two runs agree byte for byte, and
that every reported text divergence reproduces when the conversation is rendered again independently
(straight through ``apply_chat_template``, not through the tool's renderer).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import audited_conversation, shared_model
from tito_audit.audit.results import BROKEN, READY, AuditReport
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.conversations.generate import generate_conversation
from tito_audit.formatters.json_report import VOLATILE_KEYS, report_to_dict
from tito_audit.model.load_folder import JINJA
from tito_audit.model.render import DEFAULT_CLOCK, Renderer, frozen_clock
from tito_audit.model.resolve import resolve_model
from tito_audit.model.tokens import TokenCodec

pytestmark = [requires_shared, pytest.mark.shared]
COUNT = 16


def complete_folders() -> list[str]:
    if not SHARED_TOKENIZERS.is_dir():
        return []
    folders = []
    for folder in sorted(SHARED_TOKENIZERS.iterdir()):
        provenance = folder / "PROVENANCE.json"
        if folder.is_dir() and provenance.is_file() and json.loads(provenance.read_text()).get("complete", True):
            folders.append(folder.name.replace("--", "/", 1))
    return folders


@cache
def report_for(model_id: str) -> AuditReport:
    return audit(shared_model(model_id), AuditOptions(count=COUNT, seed=0))


MODELS = complete_folders()


def test_corpus_has_models():
    assert len(MODELS) >= 10


@pytest.mark.timeout(900)  # among the slowest tests: 93 s measured at load 15 (pyproject.toml's limit is 300 s)
@pytest.mark.parametrize("model_id", MODELS)
def test_audit_is_deterministic(model_id):
    first = report_to_dict(report_for(model_id))
    second = report_to_dict(audit(shared_model(model_id), AuditOptions(count=COUNT, seed=0)))
    for document in (first, second):
        for key in VOLATILE_KEYS:
            document.pop(key)
    assert json.dumps(first) == json.dumps(second)


def _conversation(failure, report: AuditReport, model, codec, kwargs):
    """The conversation as the audit rendered it (generated for the variant, reshaped, turns realizable)."""
    renderer = Renderer(model, codec, kwargs)
    with frozen_clock(model.template_source, DEFAULT_CLOCK):
        return audited_conversation(failure, report, None, renderer)


@pytest.mark.parametrize("model_id", MODELS)
def test_every_text_divergence_reproduces(model_id):
    report = report_for(model_id)
    model = shared_model(model_id)
    if model.backend != JINJA:
        pytest.skip("mistral-common renders without Jinja; checked in test_mistral_common_backend")
    codec = TokenCodec(model.tokenizer)
    checked = 0
    rebuilt = {}  # failures of one conversation in one shape share its rebuild (gemma-4: 470 failures, 84 rebuilds)
    for variant in report.variants:
        for failure in variant.failures:
            if failure.aspect != "text" or failure.check not in ("append", "rollout"):
                continue
            key = (variant.name, failure.conversation_id, tuple(failure.shape_changes))
            if key not in rebuilt:
                rebuilt[key] = _conversation(failure, report, model, codec, variant.kwargs)
            conversation = rebuilt[key]
            k = failure.turn + 1 if failure.check == "append" else failure.turn
            later = model.tokenizer.apply_chat_template(
                conversation.messages[:k],
                tools=conversation.tools,
                chat_template=model.template_source,
                add_generation_prompt=failure.check == "rollout",
                tokenize=False,
                **variant.kwargs,
            )
            if failure.check == "rollout":
                later = codec.normalize(later)  # rollout text is compared after the tokenizer's normalizer
            index = failure.char_index
            start = max(0, index - 80)
            assert later[start : start + len(failure.actual_text)] == failure.actual_text, failure
            before = failure.expected_text[: index - start]
            assert later[start:index] == before
            assert failure.expected_text[index - start : index - start + 1] != later[index : index + 1]
            checked += 1
    verdicts = {v.verdict for v in report.variants}
    if BROKEN in verdicts or any(v.checks["append"].failed for v in report.variants):
        assert checked > 0


@pytest.mark.parametrize("model_id", MODELS)
def test_ids_are_what_apply_chat_template_tokenizes(model_id):
    model = shared_model(model_id)  # loaded here, not while collecting: each test process would load every model
    if model.backend != JINJA:
        pytest.skip("mistral-common renders without Jinja: no apply_chat_template text to compare")
    codec = TokenCodec(model.tokenizer)
    conversation = generate_conversation(3, seed=0)
    messages = [{**m, "content": m.get("content") or ""} for m in conversation.messages]
    for k in (2, len(messages)):
        try:
            text = model.tokenizer.apply_chat_template(
                messages[:k], tokenize=False, chat_template=model.template_source
            )
            ids = model.tokenizer.apply_chat_template(
                messages[:k], tokenize=True, return_dict=False, chat_template=model.template_source
            )
        except Exception:
            continue
        assert codec.encode(text) == list(ids)


# -- public facts -----------------------------------------------------------------------------------


def _tool_row(report: AuditReport, variant: str = "default"):
    chosen = next(v for v in report.variants if v.name == variant)
    return next(r for r in chosen.checks["rollout"].rows if r.category == "tool"), chosen


@pytest.mark.skipif("Qwen/Qwen2.5-7B-Instruct" not in MODELS, reason="Qwen2.5-7B-Instruct folder absent")
def test_qwen25_instruct_is_ready():
    report = report_for("Qwen/Qwen2.5-7B-Instruct")
    assert report.verdict == READY
    row, _ = _tool_row(report)
    assert row.cases > 0 and row.failed == 0


@pytest.mark.skipif("Qwen/Qwen3-4B" not in MODELS, reason="Qwen3-4B folder absent")
def test_qwen3_hybrid_breaks_tool_appends_without_reasoning():
    report = report_for("Qwen/Qwen3-4B")
    assert report.verdict == BROKEN
    row, variant = _tool_row(report)
    assert row.failed > 0
    tool_text = [f for f in variant.failures if f.check == "rollout" and f.category == "tool" and f.aspect == "text"]
    assert any("empty-think-dropped" in f.causes for f in tool_text)
    for failure in tool_text:
        if "empty-think-dropped" in failure.causes:
            assert "<think>" in failure.expected_text and "</think>" in failure.expected_text


@pytest.mark.skipif("Qwen/QwQ-32B" not in MODELS, reason="QwQ-32B folder absent")
def test_think_generation_prompt_with_history_stripping_is_broken():
    report = report_for("Qwen/QwQ-32B")
    assert report.verdict == BROKEN
    assert "gen-prompt-mismatch" in report.variants[0].checks["rollout"].cause_counts


@pytest.mark.skipif("mistralai/Mistral-Nemo-Instruct-2407" not in MODELS, reason="Mistral-Nemo folder absent")
def test_mistral_common_backend():
    report = report_for("mistralai/Mistral-Nemo-Instruct-2407")
    assert report.model.backend == "mistral-common"
    assert report.model.template_sha256 is None
    assert any("without Jinja" in note for note in report.notes)
    assert [v.name for v in report.variants] == ["default"]
    assert report.variants[0].conversations_audited > 0


def test_shared_folder_is_read_in_place_not_copied():
    resolved = resolve_model(MODELS[0], mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    assert Path(resolved.path).is_relative_to(SHARED_TOKENIZERS.resolve())
