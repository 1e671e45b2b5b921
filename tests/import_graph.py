"""The package's import graph, read from the source (no module is imported): which of its modules each module
imports, at module level or inside functions, and the circles in it (strongly connected components).

``python -m tests.import_graph tito_audit.audit`` prints the circles among the modules of a package and among its
parts (its subpackages and top-level modules, each one node); ``tests/test_layout.py`` asserts there are none.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tito_audit"


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name, for its ``__init__.py``)."""
    found = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` names in an import, at module level or inside functions: ``from a
    import b`` names ``a.b`` when it is a module, else ``a``."""
    out = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                out.add(candidate if candidate in known else base)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {target for target in out if target in known and target != name}


def graph(within: str, known: Mapping[str, Path] | None = None) -> dict[str, set[str]]:
    """The import graph among the modules of package ``within`` (``tito_audit.audit``)."""
    known = modules() if known is None else known
    inside = {name: path for name, path in known.items() if name == within or name.startswith(f"{within}.")}
    return {name: {t for t in imports(name, path, known) if t in inside} for name, path in inside.items()}


def part_of(within: str) -> Callable[[str], str]:
    """A module's part of package ``within``: its subpackage or top-level module (``checks``, ``results``)."""

    def part(name: str) -> str:
        rest = name[len(within) + 1 :]
        return rest.split(".", 1)[0] if rest else "__init__"

    return part


def quotient(edges: Mapping[str, Iterable[str]], node_of: Callable[[str], str]) -> dict[str, set[str]]:
    """The graph of the parts: an edge between two parts where one of their modules imports the other's."""
    out: dict[str, set[str]] = {}
    for source, targets in edges.items():
        out.setdefault(node_of(source), set())
        for target in targets:
            if node_of(target) != node_of(source):
                out[node_of(source)].add(node_of(target))
    return out


def circles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def main(argv: list[str]) -> int:
    within = argv[0] if argv else "tito_audit.audit"
    edges = graph(within)
    parts = quotient(edges, part_of(within))
    print(f"{within}: {len(edges)} modules, {sum(map(len, edges.values()))} imports among them")
    for label, found in (("modules", circles(edges)), ("parts", circles(parts))):
        print(f"circles among the {label}: {len(found)}")
        for component in found:
            print("  " + " <-> ".join(component))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
