"""A model id that is not found, but nearly: the mirror folder a typo missed (``Qwen/Qwen3-4b`` for ``Qwen--Qwen3-4B``),
offered in the not-found error as "did you mean"."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def near_miss(wanted_folder: str, mirrors: Sequence[Path]) -> tuple[str, Path] | None:
    """The model id of a mirror folder whose name is ``wanted_folder`` (``Qwen--Qwen3-4b``) but for letter case and
    separators (``-``, ``_``, ``.``), or for one letter more or less; with the mirror that holds it. A digit is never a
    typo's (``Qwen3-8B`` is another model than ``Qwen3-4B``). None when no folder comes that close."""
    wanted = _loose(wanted_folder)
    for mirror in mirrors:
        try:
            names = sorted(entry.name for entry in mirror.iterdir() if entry.is_dir())
        except OSError:
            continue
        for name in names:
            if name != wanted_folder and (_loose(name) == wanted or _one_letter_apart(_loose(name), wanted)):
                return name.replace("--", "/", 1), mirror
    return None


def _loose(name: str) -> str:
    return "".join(c for c in name.casefold() if c not in "-_.")


def _one_letter_apart(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by one letter (not a digit) inserted or deleted."""
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    if len(longer) != len(shorter) + 1:
        return False
    at = next((k for k in range(len(shorter)) if longer[k] != shorter[k]), len(shorter))
    return longer[at].isalpha() and longer[:at] + longer[at + 1 :] == shorter
