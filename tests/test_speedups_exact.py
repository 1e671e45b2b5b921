"""The speed-ups never change a result: cached piecewise tokenization and direct template rendering
give exactly what the tokenizer and apply_chat_template give."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import load
from tito_audit.conversations.generate import generate
from tito_audit.model.render import Renderer
from tito_audit.model.segments import SegmentedEncoder
from tito_audit.model.tokens import TokenCodec

pieces = st.sampled_from(
    [
        "<|im_start|>",
        "<|im_end|>",
        "<tool_call>",
        "</tool_call>",
        "assistant\n",
        " ENDING",
        " END",
        "\n\n",
        "  ",
        "東京",
        "👨\u200d👩\u200d👧",
        "cafe\u0301",
        "x",
        '{"a": 1}',
        "<|im",
        "end|>",
    ]
)


@pytest.fixture(scope="module")
def codec(tiny_tokenizer):
    return TokenCodec(tiny_tokenizer)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.lists(pieces, max_size=25).map("".join), min_size=1, max_size=6))
def test_segmented_encoding_equals_full_encoding(codec, texts):
    assert codec.encode_many(texts) == codec._full_encode(list(texts))
    assert codec._segments.enabled


def test_segmented_encoder_switches_itself_off_on_a_difference():
    calls = []

    def wrong_then_right(texts):
        calls.append(list(texts))
        return [[len(t)] for t in texts]  # not the concatenation of its pieces

    encoder = SegmentedEncoder({"<s>": 0}, wrong_then_right)
    out = encoder.encode_many(["ab<s>cd"])
    assert not encoder.enabled
    assert out == [[len("ab<s>cd")]]  # what the full tokenizer says, not the pieces [2, 0, 2]


def test_direct_rendering_equals_apply_chat_template(tiny_model_dir, write_template):
    model = load(tiny_model_dir, write_template("good", templates.GOOD))
    codec = TokenCodec(model.tokenizer)
    renderer = Renderer(model, codec)
    for conversation in generate(12, seed=4):
        keys = [(k, gp) for k in range(1, len(conversation.messages) + 1) for gp in (False, True)]
        renders = renderer.prefixes(conversation.messages, conversation.tools, keys)
        for (k, gp), rendered in renders.items():
            expected = model.tokenizer.apply_chat_template(
                conversation.messages[:k],
                tools=conversation.tools,
                chat_template=model.template_source,
                add_generation_prompt=gp,
                tokenize=False,
            )
            assert rendered.text == expected
            assert rendered.ids == codec._full_encode([expected])[0]
    assert renderer._fast is not None, "the direct path stayed on"


@requires_shared
@pytest.mark.parametrize(
    "model_id",
    [
        "Qwen/Qwen3-4B",
        "openai/gpt-oss-20b",
        "meta-llama/Llama-3.1-8B-Instruct",
        "google/gemma-3-4b-it",
        "deepseek-ai/DeepSeek-R1",
        "microsoft/phi-4",
    ],
)
def test_real_tokenizers_segment_exactly(model_id):
    from tito_audit.model.load_folder import load_model
    from tito_audit.model.resolve import resolve_model

    if not (SHARED_TOKENIZERS / model_id.replace("/", "--")).is_dir():
        pytest.skip(f"{model_id} is not in ../shared/tokenizers")
    model = load_model(resolve_model(model_id, mirrors=[SHARED_TOKENIZERS], allow_hub=False))
    codec = TokenCodec(model.tokenizer)
    renderer = Renderer(model, codec)
    texts = []
    for conversation in generate(20, seed=9):
        messages = [{**m, "content": m.get("content") or ""} for m in conversation.messages]
        for k in range(1, len(messages) + 1):
            try:
                texts.append(
                    renderer.text(
                        messages[:k], conversation.tools, k % 2 == 0 and messages[k - 1]["role"] != "assistant"
                    )
                )
            except Exception:
                continue
    assert texts
    assert codec.encode_many(texts) == codec._full_encode(texts)


@pytest.fixture(scope="module")
def overlapping_codec(tiny_model_dir):
    """A vocabulary whose added tokens overlap the ones the template writes: one contains a written token
    ("\\n\\n\\n" around "\\n\\n"), one starts inside it ("d>x" after "<|d")."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.add_tokens(["\n\n", "\n\n\n", "<|d", "d>x"])
    return TokenCodec(tokenizer, template_source="{{ '<|im_start|>' }}\n\n{{ '<|d' }}")


overlapping_pieces = st.sampled_from(["\n", "\n\n", "<|d", "d>", "x", "<|im_start|>", " END", "a"])


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.lists(overlapping_pieces, max_size=20).map("".join), min_size=1, max_size=4))
def test_segmented_encoding_is_exact_when_added_tokens_overlap(overlapping_codec, texts):
    full = overlapping_codec._full_encode(list(texts))
    assert overlapping_codec.encode_many(texts) == full
    assert overlapping_codec._segments.enabled, "the cache met a difference and had to switch itself off"


@given(
    st.lists(st.text(alphabet="ab\n<>", min_size=1, max_size=5), min_size=0, max_size=4),
    st.text(alphabet="ab\n<>", min_size=0, max_size=7),
)
def test_indexed_overlap_agrees_with_the_pairwise_rule(written, text):
    from tito_audit.model.tokens import _overlap, _Overlaps

    assert _Overlaps(written).with_any(text) == any(_overlap(text, w) for w in written if w and text)


@pytest.fixture(scope="module")
def stripping_codec(tiny_model_dir):
    """Added tokens that take the whitespace beside them (Phi-4's are all lstrip and rstrip), beside a token
    that is whitespace itself ("\\n\\n": what a stripping token took must not be matched again)."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.add_tokens(
        [
            AddedToken("<|L|>", lstrip=True, rstrip=False, special=True, normalized=False),
            AddedToken("<|R|>", lstrip=False, rstrip=True, special=True, normalized=False),
            AddedToken("<|B|>", lstrip=True, rstrip=True, special=True, normalized=False),
            AddedToken("\n\n", normalized=False),
        ],
        special_tokens=True,
    )
    return TokenCodec(tokenizer)


stripping_pieces = st.sampled_from(
    [
        "<|L|>",
        "<|R|>",
        "<|B|>",
        "<|im_end|>",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "\u3000",
        "\xa0",
        "\x1c",
        "\u200b",
        "a",
        "b c",
    ]
)


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(st.lists(stripping_pieces, max_size=24).map("".join), min_size=1, max_size=4))
def test_segmented_encoding_is_exact_when_added_tokens_strip_whitespace(stripping_codec, texts):
    assert stripping_codec._segments._strips, "the stripping tokens are cut, not left inside the pieces"
    assert stripping_codec.encode_many(texts) == stripping_codec._full_encode(list(texts))
    assert stripping_codec._segments.enabled  # the pieces gave it: the encoder did not fall back on a difference


@pytest.mark.parametrize(
    "source",
    [
        "{{ bos_token }}\n{% for m in messages %}\n{{ raise_exception('no ' + m.role) }}\n{% endfor %}",
        "{% for m in messages %}\n{{ m.content }}\n{% if m.role == 'user' %}{{ m.content | from_json }}{% endif %}\n"
        "{% endfor %}",
        "{% for m in messages %}\n\n{{ m.content.nothing.deeper }}\n{% endfor %}",
    ],
    ids=["raise_exception", "unknown-filter", "undefined-attribute"],
)
def test_a_direct_render_names_the_line_jinja_names(tiny_model_dir, write_template, source):
    """A template that raises: the direct render's one line (type, message, template line) is the one the
    rendering through ``apply_chat_template`` gives, where Jinja rewrites the traceback itself."""
    from tito_audit.model.render import PrefixRenderError, RenderError

    model = load(tiny_model_dir, write_template("raises", source))
    renderer = Renderer(model, TokenCodec(model.tokenizer))
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(PrefixRenderError) as direct:
        renderer.prefixes(messages, None, [(1, True)])
    with pytest.raises(RenderError) as through_transformers:
        renderer.text(messages, None, True)
    assert "(template line " in str(direct.value)
    assert str(direct.value) == str(through_transformers.value)
