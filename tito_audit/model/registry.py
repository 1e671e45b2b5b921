"""The family registry: major open-weight chat-model families and their representative hub ids."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class Family:
    family: str
    models: tuple[str, ...]
    template_args: tuple[str, ...] = ()
    tool_call_style: str = ""
    special_tokens: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RegistryStops:
    """The stop tokens of a model's generation config, as texts, with where they were read."""

    texts: tuple[str, ...]
    source: str


@cache
def _data() -> dict:
    return json.loads(resources.files("tito_audit").joinpath("data/families.json").read_text(encoding="utf-8"))


@cache
def families() -> tuple[Family, ...]:
    """Every family of ``tito_audit/data/families.json``, in file order."""
    data = _data()
    return tuple(
        Family(
            family=entry["family"],
            models=tuple(entry["models"]),
            template_args=tuple(entry.get("template_args", ())),
            tool_call_style=entry.get("tool_call_style", ""),
            special_tokens=dict(entry.get("special_tokens", {})),
        )
        for entry in data["families"]
    )


def registry_model_ids() -> list[str]:
    """All representative model ids, sorted, without duplicates."""
    return sorted({model for family in families() for model in family.models})


def family_of(model_id: str) -> Family | None:
    """The family listing ``model_id`` (case-insensitive), if any.

    >>> family_of("Qwen/Qwen3-4B").family
    'Qwen3'
    """
    wanted = model_id.lower()
    for family in families():
        if any(model.lower() == wanted for model in family.models):
            return family
    return None


def registry_stop_tokens(model_id: str) -> RegistryStops | None:
    """The registry's stop tokens for ``model_id`` (case-insensitive), if it has them.

    >>> registry_stop_tokens("zai-org/GLM-4.5").texts
    ('<|endoftext|>', '<|user|>', '<|observation|>')
    """
    wanted = model_id.lower()
    for entry in _data().get("stop_tokens", []):
        if any(model.lower() == wanted for model in entry["models"]):
            return RegistryStops(tuple(entry["texts"]), entry["source"])
    return None


@dataclass(frozen=True)
class RegistryParsers:
    """A model's parsers for one engine (``--tool-call-parser``, ``--reasoning-parser``), with where they were read."""

    tool: str | None
    reasoning: str | None
    source: str
    engine: str = "sglang"
    by_format: bool = False
    """No document of the engine names a parser for the model; the pair is the one whose call format the model's
    template asks for word for word (``"chosen_by": "format"`` in the registry), and reports say so."""


def registry_parsers(model_id: str, engine: str = "sglang") -> RegistryParsers | None:
    """The parser pair ``engine``'s documentation gives for ``model_id`` (case-insensitive), if the registry has one.

    >>> registry_parsers("Qwen/Qwen3-4B").tool
    'qwen25'
    >>> registry_parsers("Qwen/Qwen3-4B", engine="vllm").tool
    'hermes'
    """
    recorded = _data().get(f"{engine}_parsers")
    if recorded is None:  # every engine records its pairs under ``<engine>_parsers``, none of them or some
        known = sorted(key.removesuffix("_parsers") for key in _data() if key.endswith("_parsers"))
        raise ValueError(f"unknown engine {engine!r} (known: {', '.join(known)})")
    wanted = model_id.lower()
    for entry in recorded:
        if any(model.lower() == wanted for model in entry["models"]):
            by_format = entry.get("chosen_by") == "format"
            return RegistryParsers(entry.get("tool"), entry.get("reasoning"), entry["source"], engine, by_format)
    return None


def registry_output_layout(model_id: str) -> str | None:
    """The name of the layout ``model_id``'s model writes its turns in, where the registry records that it differs
    from its template's history layout (``output_layouts``; :mod:`tito_audit.parse.output_layouts`).

    >>> registry_output_layout("openai/gpt-oss-20b")
    'harmony'
    """
    wanted = model_id.lower()
    for entry in _data().get("output_layouts", []):
        if any(model.lower() == wanted for model in entry["models"]):
            return str(entry["layout"])
    return None


TEXT_BEFORE_CALLS = "text before each call"
"""The habit of a model that writes text (its reasoning, or content its template renders as such) before each call."""


@dataclass(frozen=True)
class RegistryHabit:
    """What a family's model writes by habit where its template admits other forms too (``model_habits``): the
    generator writes the habit and draws ``rare_form`` for a share ``rare_share`` of the turns it concerns."""

    habit: str
    rare_form: str
    """The other form, in the words a report uses for it (``the model calls with no analysis message first``)."""
    rare_share: float
    source: str


def registry_habit(model_id: str) -> RegistryHabit | None:
    """The habit the registry records for ``model_id``'s model (case-insensitive), if any.

    >>> registry_habit("openai/gpt-oss-20b").habit
    'text before each call'
    """
    wanted = model_id.lower()
    for entry in _data().get("model_habits", []):
        if any(model.lower() == wanted for model in entry["models"]):
            return RegistryHabit(entry["habit"], entry["rare_form"], float(entry["rare_share"]), entry["source"])
    return None
