"""Plain data back into result dataclasses: the inverse of :func:`dataclasses.asdict` for the audit results
(:mod:`tito_audit.audit.results`).

The JSON report is ``asdict(report)``; :func:`report_from_dict` reads it back, so a stored result (the
matrix's results cache) or a published JSON report can be rendered again by any formatter.

>>> from tito_audit.audit.results import TokenWindow
>>> from_dict(TokenWindow, {"start": 3, "ids": [1, 2], "texts": ["a", "b"]})
TokenWindow(start=3, ids=[1, 2], texts=['a', 'b'])
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar

from tito_audit.audit.results import SCHEMA_VERSION, AuditReport

T = TypeVar("T")


class DecodeError(ValueError):
    """The data does not have the shape of the dataclass it should fill."""


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_dict(cls: type[T], data: Any) -> T:
    """An instance of the dataclass ``cls`` filled from ``data`` (nested dataclasses, lists, dicts and
    optional fields included); unknown keys or missing required fields raise :class:`DecodeError`."""
    return _decode(cls, data, cls.__name__)


def report_from_dict(data: Any) -> AuditReport:
    """The report of a JSON report's data: of this schema version, or of version 1 (one parser verdict, SGLang's),
    read into this version's shape (:func:`_from_version_1`)."""
    if isinstance(data, dict) and data.get("schema_version") == 1:
        return _from_version_1(data)
    return from_dict(AuditReport, data)


def _from_version_1(data: dict[str, Any]) -> AuditReport:
    """A version 1 report: ``parser``, ``parser_verdict`` and ``parser_way_out`` become the one entry of ``parsers``
    (its verdict, reason, causes and fields summed again from the variants), each variant's ``parse`` the one entry
    of its ``parses``, ``settings.parser`` the one name of ``settings.parsers``."""
    from tito_audit.audit.parse_step.engine_verdicts import engine_verdicts
    from tito_audit.parse.parser import TEMPLATE, ParserChoice

    data = dict(data)
    described = data.pop("parser", None)
    data.pop("parser_verdict", None)
    way_out = data.pop("parser_way_out", None)
    engine = str((described or {}).get("engine") or _engine_of_name(str((described or {}).get("name", ""))))
    settings = dict(data.get("settings") or {})
    parser = settings.pop("parser", TEMPLATE)
    settings["parsers"] = [] if parser == TEMPLATE else [parser]
    variants = []
    for variant in data.get("variants") or []:
        variant = dict(variant)
        parse = variant.pop("parse", None)
        variant["parses"] = [] if parse is None else [{**parse, "engine": engine}]
        variant["values_parser"] = parse["parser"] if parse is not None else TEMPLATE
        variants.append(variant)
    report = from_dict(
        AuditReport, {**data, "schema_version": SCHEMA_VERSION, "settings": settings, "variants": variants}
    )
    if described is not None:
        choice = ParserChoice(
            str(described.get("name")),
            None,
            str(described.get("why") or ""),
            described.get("tool"),
            described.get("reasoning"),
            str(described.get("source") or ""),
            engine=engine,
        )
        report.parsers = engine_verdicts([choice], report.verdict, report.variants)
        for verdict in report.parsers:
            verdict.way_out = way_out
    return report


def _engine_of_name(name: str) -> str:
    """``sglang`` for ``sglang qwen25+qwen3`` (version 1 named only SGLang's parsers so), else ""."""
    from tito_audit.parse.engines import engine_names

    prefix = name.split(" ", 1)[0]
    return prefix if " " in name and prefix in engine_names() else ""


def _decode(kind: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(kind)
    if kind is Any or kind is object:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        problems = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, value, where)
            except DecodeError as exc:
                problems.append(str(exc))
        raise DecodeError("; ".join(problems) or f"{where}: no type fits {value!r}")
    if origin is list:
        (item,) = typing.get_args(kind)
        _expect(value, list, where)
        return [_decode(item, element, f"{where}[{i}]") for i, element in enumerate(value)]
    if origin is dict:
        key_kind, item = typing.get_args(kind)
        _expect(value, dict, where)
        return {_decode(key_kind, k, where): _decode(item, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        _expect(value, dict, where)
        hints = _field_types(kind)
        names = {f.name for f in dataclasses.fields(kind) if f.init}
        unknown = set(value) - names
        if unknown:
            raise DecodeError(f"{where}: unknown fields {sorted(unknown)}")
        try:
            return kind(**{name: _decode(hints[name], v, f"{where}.{name}") for name, v in value.items()})
        except TypeError as exc:  # a required field is missing
            raise DecodeError(f"{where}: {exc}") from exc
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise DecodeError(f"{where}: expected a number, got {value!r}")
    if kind in (int, str, bool):
        _expect(value, kind, where)
        if kind is int and isinstance(value, bool):
            raise DecodeError(f"{where}: expected an integer, got {value!r}")
        return value
    raise DecodeError(f"{where}: cannot decode into {kind!r}")


def _expect(value: Any, kind: type, where: str) -> None:
    if not isinstance(value, kind):
        raise DecodeError(f"{where}: expected {kind.__name__}, got {type(value).__name__}")
