"""Engine-rendered models (no chat template: vLLM renders them with an encoder of its own, picked by the architecture
``config.json`` names) and vLLM's parsers on a template-only model's stand-in vocabulary.

The folder kind and its errors need neither vLLM nor ``../shared``; rendering through vLLM's encoder and parsing
with vLLM's parsers run in vLLM's worker process (skipped, naming ``make vllm``, where vLLM is not installed; on CI,
which installs it, they fail instead); DeepSeek V4's tokenizer is in ``../shared/engine-rendered`` (skipped, saying
so, where it is absent)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.errors import ModelLoadError, TemplateMissingError
from tito_audit.matrix.row import engine_cells, row_from_report
from tito_audit.model.engine_rendered import ENGINE_ENCODER
from tito_audit.model.load_by_id import load_by_id
from tito_audit.model.load_folder import codec_for, load_model
from tito_audit.model.render import PrefixRenderError, Renderer
from tito_audit.model.resolve import resolve_model
from tito_audit.parse import vllm
from tito_audit.parse.engines import engine_named
from tito_audit.parse.parser import ParseInput, ParserNeedsTokenizer
from tito_audit.parse.vllm_encoder import VLLMEncoder, connect
from tito_audit.parse.vllm_process import tokenizer_mode

if not vllm.available() and os.environ.get("CI") == "true":
    raise RuntimeError(f"vLLM is not installed on CI, so its tests cannot run; install it with: {vllm.INSTALL}")
requires_vllm = pytest.mark.skipif(not vllm.available(), reason=f"vLLM is not installed ({vllm.INSTALL})")
ENGINE_RENDERED = SHARED / "engine-rendered"
V4 = "deepseek-ai/DeepSeek-V4-Flash"
requires_v4 = pytest.mark.skipif(
    not (ENGINE_RENDERED / "deepseek-ai--DeepSeek-V4-Flash").is_dir(),
    reason="../shared/engine-rendered/deepseek-ai--DeepSeek-V4-Flash is absent (DeepSeek V4's tokenizer is not part "
    "of the repository)",
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


def _folder_of(tiny_model_dir: Path, tmp_path: Path, architecture: str | None) -> Path:
    """The tiny tokenizer in a folder of its own, with a config.json naming ``architecture`` (none when None)."""
    folder = tmp_path / "org--model"
    folder.mkdir(parents=True)
    for item in tiny_model_dir.iterdir():
        (folder / item.name).symlink_to(item)
    if architecture is not None:
        config = {"architectures": [architecture], "model_type": "x"}
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def _load(folder: Path):
    return load_model(resolve_model(str(folder), allow_hub=False))


# -- the folder kind ------------------------------------------------------------------------------------------------
def test_a_folder_without_a_template_whose_architecture_vllm_renders_in_code_is_engine_rendered(
    tiny_model_dir, tmp_path
):
    loaded = _load(_folder_of(tiny_model_dir, tmp_path, "DeepseekV4ForCausalLM"))
    assert (loaded.backend, loaded.template_source, loaded.encoder.mode) == (ENGINE_ENCODER, None, "deepseek_v4")
    assert loaded.renders_through == "rendered by vLLM's DeepSeek V4 encoder (no Jinja template)"
    assert any(note.startswith(loaded.renders_through) and "--kwarg" in note for note in loaded.notes)
    assert tokenizer_mode(vllm.model_files(loaded.resolved.path)) == "deepseek_v4"  # the worker loads it so too
    # no encoder connected: a render says so in one line instead of rendering nothing
    with pytest.raises(ModelLoadError, match="runs in vLLM's worker process, which this caller did not connect"):
        Renderer(loaded, codec_for(loaded)).text([{"role": "user", "content": "hi"}], None, True)


def test_an_encoder_that_hands_over_ids_and_a_folder_without_any_are_refused_in_one_line(tiny_model_dir, tmp_path):
    with pytest.raises(TemplateMissingError, match=r"vLLM's Kimi K3 encoder .*token ids rather than text"):
        _load(_folder_of(tiny_model_dir, tmp_path / "k3", "KimiK3ForConditionalGeneration"))
    with pytest.raises(TemplateMissingError, match="has no chat template; pass one with --template FILE"):
        _load(_folder_of(tiny_model_dir, tmp_path / "qwen", "Qwen3ForCausalLM"))


@requires_v4
@pytest.mark.shared
def test_engine_rendered_models_resolve_through_a_mirror_of_the_kind():
    loaded = load_by_id(V4, mirrors=[ENGINE_RENDERED], allow_hub=False)
    assert loaded.resolved.source == "mirror" and loaded.backend == ENGINE_ENCODER
    assert type(loaded.tokenizer).__name__ == "TokenizersBackend" and not loaded.text_level_only


# -- rendering through vLLM's encoder -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def v4():
    if not (ENGINE_RENDERED / "deepseek-ai--DeepSeek-V4-Flash").is_dir() or not vllm.available():
        pytest.skip("needs ../shared/engine-rendered (DeepSeek V4's tokenizer) and vLLM (make vllm)")
    return connect(load_by_id(V4, mirrors=[ENGINE_RENDERED], allow_hub=False))


@pytest.mark.shared
def test_the_serving_path_hands_the_encoder_reasoning_content_as_reasoning(v4):
    """vLLM's chat request renames ``reasoning_content`` to ``reasoning`` before the encoder (which reads only the
    latter) sees it: with tools declared, an earlier turn's reasoning stays; without, the encoder drops it itself."""
    renderer = Renderer(v4, codec_for(v4))
    turn = {"role": "assistant", "content": "", "reasoning_content": "let me think", "tool_calls": [CALL]}
    messages = [
        {"role": "user", "content": "Weather?"},
        turn,
        {"role": "tool", "tool_call_id": "call_1", "content": "sun"},
    ]
    kept = renderer.text(messages, TOOLS, True)
    assert "<｜Assistant｜><think>let me think</think>\n\n<｜DSML｜tool_calls>" in kept
    assert kept.endswith("<｜User｜><tool_result>sun</tool_result><｜Assistant｜><think>")
    dropped = renderer.text(messages, None, True)
    assert "let me think" not in dropped and "<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>" in dropped


@pytest.mark.shared
def test_every_prefix_of_a_conversation_is_one_request_and_a_refused_one_is_a_refusal(v4, monkeypatch):
    renderer = Renderer(v4, codec_for(v4))
    calls = []
    original = VLLMEncoder.render
    monkeypatch.setattr(VLLMEncoder, "render", lambda self, *args: calls.append(args) or original(self, *args))
    messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [CALL]}]
    prefixes = renderer.prefixes(messages, TOOLS, [(1, True), (2, False)])
    assert len(calls) == 1 and prefixes[(1, True)].text.endswith("<｜User｜>Weather?<｜Assistant｜><think>")
    assert prefixes[(2, False)].ids == codec_for(v4).encode(prefixes[(2, False)].text)
    # the encoder refuses a developer message without content, as vLLM's server answers such a request with an error
    with pytest.raises(PrefixRenderError, match="Invalid message for role `developer`"):
        renderer.prefixes([{"role": "developer", "content": ""}], None, [(1, True)])


@pytest.mark.shared
def test_an_engine_rendered_row_carries_a_verdict_and_vllms_parser_verdict_without_vllm_in_this_process(v4):
    report = audit(v4, AuditOptions(count=6, parser="auto"))
    assert report.verdict in ("ready", "ready-tool-only", "broken", "unsupported")
    (with_vllm,) = [verdict for verdict in report.parsers if verdict.engine == "vllm"]
    assert with_vllm.parser == "vllm deepseek_v4+deepseek_v4" and with_vllm.verdict
    row = row_from_report(report, "models/x.md", 1.0)
    assert row["audit_level"] == "full, rendered by vLLM's DeepSeek V4 encoder (no Jinja template)"
    assert row["vllm_verdict"] == with_vllm.verdict and row["template_sha256"] == ""
    assert "torch" not in sys.modules and "vllm" not in sys.modules


# -- vLLM's parsers on a stand-in vocabulary ------------------------------------------------------------------------
HERMES_LIKE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments}"
    " | tojson }}\n</tool_call>{%- endfor %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def template_only(tmp_path_factory):
    """A template-only folder (a chat template and configs, no vocabulary), loaded with its stand-in tokenizer."""
    folder = tmp_path_factory.mktemp("standin") / "org--template-only"
    folder.mkdir()
    (folder / "chat_template.jinja").write_text(HERMES_LIKE, encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}), encoding="utf-8")
    return _load(folder)


@requires_vllm
def test_a_parser_that_reads_only_special_tokens_runs_on_the_stand_in_vocabulary_and_says_so(template_only):
    assert template_only.text_level_only
    parser = vllm.VLLMParser("hermes", None, template_only.resolved.path, template_only.tokenizer)
    assert parser.name == "vllm hermes on a stand-in vocabulary"
    text = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    message = parser.parse(ParseInput(text=text, tools=TOOLS, ids=tuple(template_only.tokenizer.encode(text))))
    assert message["content"] == "Sure.\n" and message["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}


@requires_vllm
def test_a_parser_that_reads_more_than_special_tokens_keeps_no_tokenizer_here(template_only):
    with pytest.raises(ParserNeedsTokenizer, match="openai reads more of it than the special tokens"):
        vllm.VLLMParser("openai", None, template_only.resolved.path, template_only.tokenizer)
    # hunyuan_a13b reads no token at all, but vLLM's hand-over for it skips special tokens even with tools declared:
    # what it is handed then depends on which tokens the real vocabulary marks special
    with pytest.raises(ParserNeedsTokenizer, match="hand-over for these parsers skips special tokens") as skips:
        vllm.VLLMParser("hunyuan_a13b", None, template_only.resolved.path, template_only.tokenizer)
    assert skips.value.why.startswith("with tools declared")  # the report's note gives the reason too


@requires_vllm
def test_a_template_only_row_carries_vllms_verdict_on_a_stand_in_vocabulary(template_only):
    report = audit(template_only, AuditOptions(count=4, parser="vllm:hermes"))
    cells = engine_cells(report, engine_named("vllm"))
    assert cells["vllm_parser"] == "vllm hermes on a stand-in vocabulary" and cells["vllm_verdict"]
    assert "torch" not in sys.modules and "vllm" not in sys.modules
