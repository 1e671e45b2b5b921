"""``--from-hub FILTER``: the model ids of a matrix, listed from the Hugging Face Hub with huggingface_hub.

FILTER is comma-separated ``key=value`` pairs: ``author=ORG``, ``tag=TAG`` (repeatable; library names such as
``transformers`` are tags too), ``search=TEXT``, ``sort=downloads|likes|trending_score|created_at|last_modified``
and ``limit=N``. Only models tagged ``conversational`` are listed (the Hub's tag for chat models, which ship a
chat template); the matrix then reports any that have none.

>>> parse_filter("author=Qwen,tag=text-generation,limit=20")
HubFilter(author='Qwen', tags=('text-generation',), search=None, sort='downloads', limit=20)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tito_audit.errors import BadInputError, ResolutionError

CHAT_TAG = "conversational"
SORTS = ("downloads", "likes", "trending_score", "created_at", "last_modified")
DEFAULT_LIMIT = 1000


@dataclass(frozen=True)
class HubFilter:
    author: str | None = None
    tags: tuple[str, ...] = ()
    search: str | None = None
    sort: str = "downloads"
    limit: int | None = DEFAULT_LIMIT


def parse_filter(text: str) -> HubFilter:
    author = search = None
    tags: list[str] = []
    sort, limit = "downloads", DEFAULT_LIMIT
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise BadInputError(f"--from-hub {text!r}: expected key=value pairs, got {part!r}")
        if key == "author":
            author = value
        elif key == "tag":
            tags.append(value)
        elif key == "search":
            search = value
        elif key == "sort":
            if value not in SORTS:
                raise BadInputError(f"--from-hub: sort must be one of {', '.join(SORTS)}, got {value!r}")
            sort = value
        elif key == "limit":
            if not value.isdigit() or int(value) < 1:
                raise BadInputError(f"--from-hub: limit must be a positive integer, got {value!r}")
            limit = int(value)
        else:
            raise BadInputError(f"--from-hub: unknown key {key!r} (author, tag, search, sort, limit)")
    return HubFilter(author, tuple(tags), search, sort, limit)


def list_hub_models(hub_filter: HubFilter, api: Any = None) -> list[str]:
    """The ids of chat models matching ``hub_filter`` (``api``: an ``HfApi``, replaceable in tests)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ResolutionError("--from-hub needs the Hugging Face Hub, and HF_HUB_OFFLINE is set")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    try:
        models = api.list_models(
            filter=[CHAT_TAG, *hub_filter.tags],
            author=hub_filter.author,
            search=hub_filter.search,
            sort=hub_filter.sort,
            limit=hub_filter.limit,
        )
        return [model.id for model in models]
    except Exception as exc:  # connection refused, DNS failure, HTTP error: one line, never a traceback
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ResolutionError(
            f"--from-hub: the Hugging Face Hub is not reachable ({type(exc).__name__}: {first_line})"
        ) from exc
