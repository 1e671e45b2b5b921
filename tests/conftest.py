"""Shared fixtures: a tiny BPE tokenizer built in memory, small templates, the ../shared corpus."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.run_guard import (  # noqa: F401  (hooks: what each test process runs, what a dead worker left)
    pytest_configure,
    pytest_runtest_protocol,
    pytest_testnodedown,
    pytest_unconfigure,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
SHARED_TOKENIZERS = SHARED / "tokenizers"

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|eot|>"]
ADDED_NOT_SPECIAL = ["<think>", "</think>", "<tool_call>", "</tool_call>"]


def _corpus() -> list[str]:
    from tito_audit.conversations.generate import generate
    from tito_audit.conversations.stress import OBSERVATIONS, STRESS_TEXTS

    texts = list(STRESS_TEXTS.values()) + list(OBSERVATIONS.values())
    for conversation in generate(40, seed=123):
        for message in conversation.messages:
            texts.append(json.dumps(message, ensure_ascii=False))
    # " ENDING" must be one token and " END" another, for the BPE-seam template.
    texts += [" END", " ENDING", " ENDING results", "system user assistant tool"] * 200
    return texts


def build_tiny_tokenizer(
    folder: Path,
    *,
    eos: str = "<|im_end|>",
    generation_eos: list[str] | None = None,
    lowercase: bool = False,
    bos: str | None = None,
) -> Path:
    """Train a small byte-level BPE and save it as a transformers tokenizer folder.

    ``lowercase`` adds a normalizer; ``bos`` makes ``tokenizer(text)`` prepend that token.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    extra = {}
    if bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tokenizer.token_to_id(bos))]
        )
        extra["bos_token"] = bos
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=eos, pad_token="<|endoftext|>", **extra)
    wrapped.add_tokens(ADDED_NOT_SPECIAL)
    folder.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(str(folder))
    if generation_eos is not None:
        ids = [wrapped.convert_tokens_to_ids(t) for t in generation_eos]
        (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": ids}), encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer folder (no chat template of its own unless a test writes one)."""
    return build_tiny_tokenizer(tmp_path_factory.mktemp("tiny") / "tiny-org--tiny-model", generation_eos=["<|im_end|>"])


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture
def write_template(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(name: str, source: str) -> Path:
        path = tmp_path / f"{name}.jinja"
        path.write_text(source, encoding="utf-8")
        return path

    return write


def shared_available() -> bool:
    return SHARED_TOKENIZERS.is_dir()


requires_shared = pytest.mark.skipif(
    not shared_available(), reason="../shared/tokenizers is absent (real tokenizers are not part of the repository)"
)


LONGEST_FIRST = (
    "test_session_corpus.py",
    "test_shared_models.py",
    "test_fixes.py",
    "test_explain_patch.py",
    "test_docs_blocks.py",
    "test_check.py",
    "test_gateway_faults.py",
    "test_published_matrix.py",
    "test_real_conversations.py",
    "test_render_memo_reports.py",
)
"""The test files that take longest (``--durations``, on 2 cores), longest first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest test files first: under ``-n 2 --dist worksteal`` (make test) each worker takes half the tests in
    this order and an idle worker steals from the other's queue, so a long test started last would leave the other
    worker idle until it ends (longest-first keeps both busy)."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    """The tests' small templates (``tests/templates.py``) by name, each loaded with the tiny tokenizer once per
    module: ``models(name) -> (LoadedModel, template path)``."""
    from tests import templates
    from tests.helpers import load

    folder = tmp_path_factory.mktemp("session-templates")
    cache: dict[str, object] = {}

    def model(name: str):
        if name not in cache:
            path = folder / f"{name}.jinja"
            path.write_text(getattr(templates, name), encoding="utf-8")
            cache[name] = (load(tiny_model_dir, path), path)
        return cache[name]

    return model
