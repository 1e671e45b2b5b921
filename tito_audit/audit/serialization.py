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

from tito_audit.audit.results import AuditReport

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
    return from_dict(AuditReport, data)


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
    if dataclasses.is_dataclass(kind):
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
