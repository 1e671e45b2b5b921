"""Findings that come from the tokenizer rather than the template: normalization, BOS, partial UTF-8."""

from __future__ import annotations

import random

from tests import templates
from tests.conftest import build_tiny_tokenizer
from tests.helpers import causes, default_variant, failed, load, run_audit
from tito_audit.audit.checks.outcome import Outcome
from tito_audit.audit.checks.rollout_context import CheckSetup, RolloutContext
from tito_audit.audit.checks.roundtrip import completion_roundtrip
from tito_audit.audit.checks.trace import Completion
from tito_audit.audit.results import READY
from tito_audit.conversations.conversation import Conversation
from tito_audit.model.render import Renderer
from tito_audit.model.tokens import TokenCodec


def test_normalizer_is_not_blamed_on_the_template(tmp_path, write_template):
    folder = build_tiny_tokenizer(tmp_path / "acme--lower", lowercase=True, generation_eos=["<|im_end|>"])
    report = run_audit(folder, write_template("good", templates.GOOD), count=16)
    variant = default_variant(report)
    assert report.verdict == READY
    assert failed(variant, "rollout") == 0
    assert "normalization" in causes(variant, "roundtrip")


def test_bos_added_twice_is_a_finding(tmp_path, write_template):
    folder = build_tiny_tokenizer(tmp_path / "acme--bos", bos="<|endoftext|>", generation_eos=["<|im_end|>"])
    source = templates.build(preamble="{{ bos_token }}")
    report = run_audit(folder, write_template("bos", source), count=4)
    variant = default_variant(report)
    assert [f.cause for f in variant.findings if f.cause == "bos-duplication"] == ["bos-duplication"]
    assert report.verdict == READY
    plain = run_audit(folder, write_template("nobos", templates.GOOD), count=4)
    assert not [f for f in default_variant(plain).findings if f.cause == "bos-duplication"]


def test_partial_utf8_completion_is_labelled(tiny_model_dir, write_template):
    model = load(tiny_model_dir, write_template("good", templates.GOOD))
    codec = TokenCodec(model.tokenizer)
    emoji = codec.encode_plain("👍")
    assert len(emoji) > 1, "the tiny vocabulary spells this emoji in byte tokens"
    setup = CheckSetup.create(Renderer(model, codec), codec, [codec.id_of("<|im_end|>")], seed=0)
    completion = Completion(
        turn=1, text="", ids=emoji[:1], noncanonical=None, tail="", stopped=False, gen_prompt_mismatch=False
    )
    outcome = Outcome()
    completion_roundtrip(RolloutContext(setup, Conversation(id="c0000", messages=[]), {}, {}), completion, outcome)
    assert outcome.failures and all(f.causes == ["utf8-split"] for f in outcome.failures)
    assert {f.category for f in outcome.failures} == {"completion (canonical)", "completion text"}


def test_noncanonical_split_decodes_to_the_same_text(tiny_model_dir, write_template):
    model = load(tiny_model_dir, write_template("good", templates.GOOD))
    codec = TokenCodec(model.tokenizer)
    ids = codec.encode('Let me look that up. <tool_call>get_weather {"city": "Paris"}</tool_call><|im_end|>')
    rng = random.Random(3)
    split = codec.noncanonical(ids, rng)
    assert split is not None and split != ids and len(split) > len(ids)
    assert codec.decode(split) == codec.decode(ids)
    for token in ("<tool_call>", "</tool_call>", "<|im_end|>"):
        assert split.count(codec.id_of(token)) == ids.count(codec.id_of(token)), "added tokens are never split"
