"""What keeps the library safe in worker threads with no process-wide mutable state: one lock for the first imports
of the heavy modules it loads lazily, and a cached property that holds no lock while it computes.

First imports. transformers is a package whose modules import one another, and it imports most of them lazily, on
the first read of an attribute (``from transformers import AutoTokenizer``) and inside ``from_pretrained`` (the
tokenizer's class, its converter, mistral-common). When two threads import such a package at once, Python's
deadlock avoidance hands one of them a module still being initialised, and the import fails there
(``ImportError: cannot import name 'AutoTokenizer'``): eight threads opening sessions on eight models in a fresh
process failed that way. Every lazy import of a heavy module (transformers, tokenizers, huggingface_hub,
SGLang's parsers) and every tokenizer load therefore runs under :data:`IMPORT_LOCK`. A lock object is the only
state; once a module is imported, :func:`imported` returns it without taking the lock, so renders never wait on it.

The cached property. Before Python 3.12, :class:`functools.cached_property` computes under one lock per property
shared by every instance of the class: two threads asking two objects (two templates' audits, two models'
sessions) for a property whose computation renders take turns, and a render limit of 10 s became 20 s for the
second thread. :class:`cached_property` locks nothing; two threads asking one object at once may both compute it,
and both get the value stored first.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Generic, TypeVar, overload

IMPORT_LOCK = threading.RLock()
"""Held by every first import of a heavy module and by every tokenizer load (see the module docstring)."""

T = TypeVar("T")
_MISSING = object()


@contextmanager
def first_import() -> Iterator[None]:
    """A block whose imports (and transformers' lazy imports inside it) no other thread's first imports overlap."""
    with IMPORT_LOCK:
        yield


def imported(name: str) -> ModuleType:
    """The module ``name``, imported under :data:`IMPORT_LOCK` unless it is already fully imported."""
    module = sys.modules.get(name)
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
        return module
    with IMPORT_LOCK:
        return importlib.import_module(name)


class cached_property(Generic[T]):
    """:class:`functools.cached_property` without its class-wide lock (see the module docstring)."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> cached_property[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        stored = instance.__dict__
        value = stored.get(self.name, _MISSING)
        if value is _MISSING:
            value = stored.setdefault(self.name, self.func(instance))
        return value
