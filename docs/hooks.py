"""MkDocs hooks of the documentation site (``mkdocs.yml``, ``hooks:``).

At build time they write the pages no one keeps by hand and put the published matrix under the same root:

- ``reference/cli.md``: every command, argument and option of ``tito-audit``, walked from the typer app itself
  (click introspection), so a new option appears in the reference the moment it exists;
- ``reference/json.md``: the JSON report, from the dataclasses of ``tito_audit/audit/results.py`` (field names,
  types, and the docstring under each field);
- ``reports/``: the matrix pages (``reports/index.html``, ``reports/models/*``, ``reports/fixes/*``) copied into
  the site, the HTML pages as site files (so links to them are checked by ``--strict``), the rest as they are.

The functions are importable on their own (``tests/test_docs_site.py`` loads this file by path).
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
import shutil
import sys
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
GENERATED_NOTE = "<!-- generated at build time by docs/hooks.py; edit the code, not this page -->\n\n"


# ---------------------------------------------------------------- the CLI reference


def cli_commands() -> list[tuple[str, Any]]:
    """``(name, click command)`` of every ``tito-audit`` command, in the order the app lists them."""
    import typer

    from tito_audit.cli import app

    group = typer.main.get_command(app)
    names = group.list_commands(None)  # type: ignore[arg-type]
    return [(name, group.get_command(None, name)) for name in names]  # type: ignore[arg-type]


def option_names(param: Any) -> list[str]:
    """Every spelling of a parameter: ``['--quiet', '-q']``; an argument's name (``model``)."""
    if getattr(param, "param_type_name", "") == "argument":
        return [param.name]
    return [*param.opts, *param.secondary_opts]


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def cli_reference() -> str:
    """The CLI reference page (Markdown): per command its usage, its help and a row per parameter, as ``--help``
    gives them (names with the value's type, then the help with required/default/range notes)."""
    import typer

    lines = [
        "# Command-line reference",
        "",
        GENERATED_NOTE.strip(),
        "",
        "Generated from the `tito-audit` typer app when the site is built: every command, argument and option, "
        "as `tito-audit COMMAND --help` prints them. Exit codes: [Errors and exit codes](../errors.md).",
        "",
    ]
    for name, command in cli_commands():
        ctx = typer.Context(command, info_name=f"tito-audit {name}")
        usage = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), command.get_usage(ctx))
        lines += [f"## tito-audit {name}", "", "```text", usage, "```", ""]
        if command.help:
            lines += [" ".join(command.help.split("\n\n")[0].split()), ""]
        lines += ["| argument or option | meaning |", "|---|---|"]
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            record = param.get_help_record(ctx)
            spelled, meaning = record if record else (", ".join(option_names(param)), "")
            if getattr(param, "param_type_name", "") == "argument":
                spelled = f"{param.name.upper()} {spelled.split(' ', 1)[1] if ' ' in spelled else ''}".strip()
            spelled = re.sub(r"<list\[(\w+)\]>", lambda m: f"<{m.group(1).lower()}> …", spelled)
            lines.append(f"| `{_cell(spelled)}` | {_cell(meaning)} |")
        lines += ["| `--help` | Show the command's help and exit. |", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- the JSON report


def _field_docs(source: Path) -> dict[tuple[str, str], str]:
    """``(class, field) → docstring`` from the string literal under each annotated field of ``source``."""
    docs: dict[tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        for here, after in itertools.pairwise(body):
            if (
                isinstance(here, ast.AnnAssign)
                and isinstance(here.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[(node.name, here.target.id)] = " ".join(after.value.value.split())
    return docs


def _type_text(hint: Any, nested: list[type]) -> str:
    """A readable type; dataclasses met on the way are queued in ``nested`` and linked."""
    if dataclasses.is_dataclass(hint):
        if hint not in nested:
            nested.append(hint)  # type: ignore[arg-type]
        return f"[{hint.__name__}](#{hint.__name__.lower()})"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None:
        return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))
    if origin in (list, tuple, set):
        return f"list of {_type_text(args[0], nested)}" if args else "list"
    if origin is dict:
        return f"object of {_type_text(args[0], nested)} → {_type_text(args[1], nested)}" if args else "object"
    return " or ".join(_type_text(a, nested) for a in args)  # Union / Optional


def json_reference() -> str:
    """The JSON report page (Markdown): one table per dataclass reachable from ``AuditReport``."""
    from tito_audit.audit import results
    from tito_audit.audit.service import SCHEMA_VERSION

    docs: dict[tuple[str, str], str] = {}
    read: set[str] = set()
    lines = [
        "# The JSON report",
        "",
        GENERATED_NOTE.strip(),
        "",
        f"`tito-audit audit MODEL --json FILE` (and `check --report`, the matrix's `reports/models/*.json`) "
        f"writes the `AuditReport` dataclass of `tito_audit/audit/results.py` as JSON, schema version "
        f"{SCHEMA_VERSION}. This page is generated from those dataclasses when the site is built. "
        "Only `generated_at` and `duration_seconds` differ between two runs with the same model, settings and "
        "seed. `tito_audit.audit.serialization` reads a report back into the same classes.",
        "",
    ]
    nested: list[type] = [results.AuditReport]
    done = 0
    while done < len(nested):
        cls = nested[done]
        done += 1
        hints = typing.get_type_hints(cls)
        module = sys.modules[cls.__module__].__file__ or ""
        if module not in read:  # field docs from the module that defines the class (results and its neighbours)
            read.add(module)
            docs.update(_field_docs(Path(module)))
        lines += [f"## {cls.__name__}", ""]
        if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):
            lines += [" ".join(cls.__doc__.split()), ""]
        lines += ["| field | type | meaning |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            if f.metadata.get("transient"):  # kept in memory for the explanations: listed, never written
                lines.append(f"| `{f.name}` | not written | {_cell(docs.get((cls.__name__, f.name), ''))} |")
                continue
            kind = _type_text(hints[f.name], nested)
            lines.append(f"| `{f.name}` | {kind} | {_cell(docs.get((cls.__name__, f.name), ''))} |")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- MkDocs events

GENERATED = {"reference/cli.md": cli_reference, "reference/json.md": json_reference}


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages and the matrix's HTML pages (``reports/**/*.html``) to the site's files."""
    from mkdocs.structure.files import File

    for uri, make in GENERATED.items():
        files.append(File.generated(config, uri, content=make()))
    if REPORTS.is_dir():
        for page in sorted(REPORTS.rglob("*.html")):
            uri = page.relative_to(ROOT).as_posix()
            files.append(File.generated(config, uri, abs_src_path=str(page)))
    return files


def on_post_build(config: Any) -> None:
    """Copy the rest of ``reports/`` (Markdown, JSON, CSV, Parquet, diffs) beside its HTML pages, as they are."""
    if not REPORTS.is_dir():
        return
    site = Path(config["site_dir"]) / "reports"
    for path in sorted(REPORTS.rglob("*")):
        if path.is_file() and path.suffix != ".html":
            target = site / path.relative_to(REPORTS)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
