"""The typed rows name exactly the published columns, in their order, so that a new column (another engine, another
step kind) cannot reach the tables without its type, nor a type outlive its column."""

from __future__ import annotations

from typing import get_type_hints

import pytest

from tito_audit.matrix import corpus_publish, row


def test_matrix_row_keys_are_the_columns_in_order_the_engines_columns_aside():
    engine_columns = row.engine_columns()
    assert tuple(row.MatrixRow.__annotations__) == tuple(c for c in row.COLUMNS if c not in engine_columns)
    assert engine_columns == tuple(f"{name}_{part}" for name in ("sglang", "vllm") for part in row.ENGINE_PARTS)


def test_a_base_row_holds_every_column():
    built = row.base_row("org/name", row.NOT_REACHABLE, "why")
    assert tuple(built) == row.COLUMNS
    assert set(built) == set(get_type_hints(row.MatrixRow)) | set(row.engine_columns())


def test_corpus_row_keys_are_the_corpus_columns():
    hints = get_type_hints(corpus_publish.CorpusRow)
    assert tuple(hints) == tuple(c for c in corpus_publish.COLUMNS if c not in corpus_publish.ENGINE_VERDICTS)
    assert corpus_publish.ENGINE_VERDICTS == ("sglang_verdict", "vllm_verdict")


def test_set_cells_refuses_a_name_that_is_no_column():
    built = row.base_row("org/name", row.AUDITED)
    row.set_cells(built, {"sglang_verdict": "ready"})
    assert built["sglang_verdict"] == "ready"
    with pytest.raises(KeyError, match="not matrix columns"):
        row.set_cells(built, {"sglang_verdikt": "ready"})
