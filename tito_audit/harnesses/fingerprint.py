"""What decides a cell of the harness matrix, as digests: the table stores each cell under them (:mod:`.run`), so a
change reruns the cells it can change and no other.

- **The runner** (:func:`runner_digest`): the code a lane runs, found by following its imports from
  :mod:`tito_audit.harnesses.lane` through tito-audit's own modules (an ``import`` anywhere in a module, a module
  named in a string, as ``python -m`` and lazy exports name them): the lane, the group, the gateway, the stand-in
  engine, the session, the parsers, the model and the audit's realization they use, with the data files they read.
  The harness modules are left out of it (the catalogue imports them all): each is its harness's own.
- **The harness** (:func:`harness_digest`): its own module, and the scripts its rollouts run (a framework's driver,
  the drivers' shared module, the zygote its rollouts are forked from).

The model's files, the parser, the harness's package and pinned version, the configuration, the rollouts and the seed
are the rest of a cell's key (:func:`tito_audit.harnesses.run.cell_key`). The pages' own modules (:mod:`.rows`,
:mod:`.publish`, :mod:`.page`, :mod:`.run`, the CLI) decide no record and are in no digest.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import tito_audit
from tito_audit.harnesses import catalogue
from tito_audit.harnesses.harness import PYPI, Harness

PACKAGE = "tito_audit"
RUNNER = "tito_audit.harnesses.lane"
"""Where a lane's code starts."""
DATA = ("data", "parse/vllm_site")
"""Folders of files the runner's code reads (the registry; what vLLM's parser process runs at start)."""
DRIVERS = "harnesses/drivers"
SHARED_DRIVERS = ("looking.py",)
"""Driver modules every framework driver imports."""
_MODULE_NAME = re.compile(r"^tito_audit(?:\.[A-Za-z_]\w*)+$")


def package_root() -> Path:
    return Path(tito_audit.__file__).parent


def harness_modules() -> dict[str, str]:
    """Each harness's module, by harness name (as the catalogue imports them)."""
    found: dict[str, str] = {}
    for module in vars(catalogue).values():
        if isinstance(module, ModuleType) and module.__name__.startswith(f"{PACKAGE}.harnesses."):
            for value in vars(module).values():
                if isinstance(value, Harness):
                    found[value.name] = module.__name__
    return found


def module_file(root: Path, name: str) -> Path | None:
    """The file of module ``name`` under ``root`` (the package's folder), or None when it is not one of ours."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = root.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _named(tree: ast.AST, name: str, is_package: bool) -> Iterable[str]:
    """The module names a module's code imports, or names in a string."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*parent, base] if base else parent)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.match(node.value):
            yield node.value


def closure(root: Path, start: str, leave_out: set[str]) -> dict[str, Path]:
    """Every module of ours that ``start`` imports, directly or not (their packages' ``__init__`` too), but those in
    ``leave_out`` (and what only they import)."""
    found: dict[str, Path] = {}
    waiting = [start]
    while waiting:
        name = waiting.pop()
        if name in found or name in leave_out:
            continue
        path = module_file(root, name)
        if path is None:
            continue
        found[name] = path
        parts = name.split(".")
        waiting += [".".join(parts[:n]) for n in range(1, len(parts))]
        tree = ast.parse(path.read_bytes(), filename=str(path))
        waiting += list(_named(tree, name, path.name == "__init__.py"))
    return found


def _digest(root: Path, paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(set(paths)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


CATALOGUE = "tito_audit.harnesses.catalogue"


def runner_modules(root: Path) -> dict[str, Path]:
    """The runner's modules (see the module docstring): the harness modules and the catalogue left out."""
    return closure(root, RUNNER, {CATALOGUE, *harness_modules().values()})


def runner_digest(root: Path | None = None) -> str:
    """The digest of the runner's code and data (see the module docstring)."""
    root = root or package_root()
    paths = list(runner_modules(root).values())
    for folder in DATA:
        paths += [p for p in (root / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return _digest(root, paths)


def harness_digests(harnesses: Iterable[Harness], root: Path | None = None) -> dict[str, str]:
    """:func:`harness_digest` of each harness, by name (the runner's modules found once)."""
    root = root or package_root()
    shared = set(runner_modules(root)) | {CATALOGUE}
    return {h.name: harness_digest(h, root, shared) for h in harnesses}


def harness_digest(harness: Harness, root: Path | None = None, shared: set[str] | None = None) -> str:
    """The digest of a harness's own code: its module (and what only it imports) and the scripts its rollouts
    run; ``shared``: the runner's modules (found when not given)."""
    root = root or package_root()
    shared = shared if shared is not None else set(runner_modules(root)) | {CATALOGUE}
    paths = list(closure(root, harness_modules()[harness.name], shared).values())
    script = getattr(harness.command, "script", None)
    drivers = root / DRIVERS
    if script:
        paths += [drivers / f"{script}.py", *(drivers / name for name in SHARED_DRIVERS)]
    if harness.source == PYPI:
        paths.append(drivers / "zygote.py")
    return _digest(root, [p for p in paths if p.is_file()])
