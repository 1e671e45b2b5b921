"""The audit report's formats: one interface (``formatters/interface.py``), one registry, and the command line's
options read from it, so that a new format is its module and one name in the registry."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import typer

import tito_audit.formatters
from tito_audit.formatters.interface import ReportFormat
from tito_audit.formatters.registry import REPORT_FORMATS


def _implementations() -> list[type[ReportFormat]]:
    found = []
    for info in pkgutil.walk_packages(tito_audit.formatters.__path__, "tito_audit.formatters."):
        module = importlib.import_module(info.name)
        found += [
            c
            for _, c in inspect.getmembers(module, inspect.isclass)
            if issubclass(c, ReportFormat) and c is not ReportFormat and c.__module__ == module.__name__
        ]
    return found


def test_every_format_implements_the_interface_and_is_registered_once():
    implemented = _implementations()
    assert sorted(c.__name__ for c in implemented) == sorted(type(f).__name__ for f in REPORT_FORMATS)
    assert all(not inspect.isabstract(c) for c in implemented)
    names = [f.name for f in REPORT_FORMATS]
    assert len(set(names)) == len(names) and all(name.isidentifier() for name in names)


def test_audit_offers_one_file_option_per_format_in_the_registry_order():
    from tito_audit.cli import app

    command = typer.main.get_command(app).commands["audit"]  # the application is a group of commands
    options = [opt for param in command.params for opt in param.opts if opt in {f.option for f in REPORT_FORMATS}]
    assert options == [f.option for f in REPORT_FORMATS]
    # the formats every user and the matrix's docs rely on, written out (not read from the registry)
    assert options[:3] == ["--json", "--markdown", "--html"]
