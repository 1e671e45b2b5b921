"""The package reads as the path of data: imports only go down the stages, no module imports itself back (no
circle), and no module grows past what one person reads in one sitting."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest

from tests import import_graph

PACKAGE = Path(__file__).resolve().parent.parent / "tito_audit"
STAGES = (
    ("errors", "outputs", "inputs"),
    ("model",),
    ("conversations",),
    ("parse",),
    ("audit",),
    ("repair", "session", "gate"),
    ("gateway",),
    ("formatters",),
    ("matrix",),
    ("harnesses",),
    ("cli",),
)
"""Each stage may import the stages before it (and its own), never one after it."""
FACADES = frozenset({"tito_audit", "tito_audit.__main__", "tito_audit.service", "tito_audit.resolve"})
"""The package's entry points and the two compatibility paths: they import from any stage."""
MAX_LINES = 420


def _modules() -> dict[str, Path]:
    return import_graph.modules(PACKAGE)


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports, at module level or inside functions."""
    return import_graph.imports(name, path, modules)


def _stage(name: str) -> int:
    top = name.split(".")[1] if "." in name else ""
    return next((i for i, stage in enumerate(STAGES) if top in stage), 0)


def test_imports_only_go_down_the_stages():
    modules = _modules()
    upward = [
        f"{name} -> {target}"
        for name, path in modules.items()
        if name not in FACADES
        for target in _imports(name, path, modules)
        if _stage(target) > _stage(name)
    ]
    assert upward == []


def test_no_module_imports_itself_back():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    circles = []
    for start in graph:  # a module that reaches itself through its imports
        seen, frontier = set(), list(graph[start])
        while frontier:
            current = frontier.pop()
            if current == start:
                circles.append(start)
                break
            if current not in seen:
                seen.add(current)
                frontier.extend(graph[current])
    assert circles == []


STAGE_PACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py") if p.parent.name != "data")


@pytest.mark.parametrize("package", STAGE_PACKAGES)
def test_no_part_of_a_package_imports_another_back(package):
    """Within a package, its parts (each subpackage, each top-level module) import one another in one direction: no
    circle among them, nor among its modules (``python -m tests.import_graph tito_audit.audit`` lists them). In
    audit/ the report's types sit at the bottom, the steps above them, the orchestrators on top."""
    within = f"tito_audit.{package}"
    edges = import_graph.graph(within, _modules())
    assert import_graph.circles(edges) == []
    assert import_graph.circles(import_graph.quotient(edges, import_graph.part_of(within))) == []


def test_the_graph_finds_a_circle_among_parts():
    edges = {"p.a.x": {"p.b"}, "p.b": {"p.a.y"}, "p.a.y": set(), "p.c": {"p.b"}}
    assert import_graph.circles(edges) == []
    assert import_graph.circles(import_graph.quotient(edges, import_graph.part_of("p"))) == [["a", "b"]]


AUDIT_TYPES = ("results", "engine_result", "written_result", "result_conditions", "audit_options")
"""The bottom of audit/ beside ``core/``: the report's types (plain dataclasses, the JSON report's schema) and the
settings."""
AUDIT_ORCHESTRATORS = ("service", "variant", "disagreement", "public", "vllm_reference")
"""The top of audit/: what runs the steps in order (and the public entry a loop at run time reads)."""


def test_the_audits_types_import_no_step_and_no_step_imports_an_orchestrator():
    """The report's types are what every step produces, so they import none of them (``core/`` reads only them and
    itself); a step is run by an orchestrator and never runs one (a second orchestrator filed inside a step package
    imports the first)."""
    within = "tito_audit.audit"
    edges = import_graph.graph(within, _modules())
    part = import_graph.part_of(within)
    types = {f"{within}.{name}" for name in AUDIT_TYPES}
    assert types <= set(edges) and {f"{within}.{name}" for name in AUDIT_ORCHESTRATORS} <= set(edges)
    assert {name: sorted(edges[name] - types) for name in types if edges[name] - types} == {}
    core_reads = {
        name: sorted(t for t in targets if part(t) != "core" and t not in types)
        for name, targets in edges.items()
        if part(name) == "core"
    }
    assert {name: targets for name, targets in core_reads.items() if targets} == {}
    runs_an_orchestrator = {
        name: sorted(t for t in targets if part(t) in AUDIT_ORCHESTRATORS)
        for name, targets in edges.items()
        if part(name) not in AUDIT_ORCHESTRATORS and name != within
    }
    assert {name: targets for name, targets in runs_an_orchestrator.items() if targets} == {}


def test_every_package_says_what_enters_and_leaves_it():
    for init in PACKAGE.glob("*/__init__.py"):
        if init.parent.name in ("data",):
            continue
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring, f"{init.parent.name}/__init__.py has no docstring"


OVER_THE_CAP = re.compile(r"^Longer than the line cap: \S.{20,}", re.M)
"""How a module says why it keeps more than :data:`MAX_LINES` lines (a paragraph of its docstring): one cohesive
concept split only to pass a count reads worse than one long file (httpx keeps its client in one)."""


def test_a_module_past_the_line_cap_says_why():
    """The cap is a warning, not a wall: a module past :data:`MAX_LINES` lines passes when its docstring has a
    paragraph ``Longer than the line cap: <reason>``, and is listed as a warning; one without a reason fails."""
    long = {name: path for name, path in _modules().items() if len(path.read_text().splitlines()) > MAX_LINES}
    unexplained = []
    for name, path in sorted(long.items()):
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if OVER_THE_CAP.search(docstring):
            warnings.warn(f"{name} is past {MAX_LINES} lines (its docstring says why)", stacklevel=1)
        else:
            unexplained.append(name)
    assert unexplained == [], f"past {MAX_LINES} lines with no 'Longer than the line cap: <reason>' paragraph"


def test_the_reason_to_pass_the_cap_is_read_from_the_docstring():
    assert OVER_THE_CAP.search("A client.\n\nLonger than the line cap: one cohesive client, as httpx keeps its own.")
    assert not OVER_THE_CAP.search("A client.\n\nLonger than the line cap:")


def test_every_dialect_module_implements_the_dialect_interface_and_is_served():
    """Each module of ``gateway/dialects/`` is the interface, one dialect (one :class:`Dialect` subclass, named in
    ``DIALECTS``) or a part of one (``<dialect>_*.py``); the web layer serves ``DIALECTS`` and names no dialect."""
    import importlib
    import inspect

    from tito_audit.gateway.dialects import DIALECTS, Dialect

    folder = PACKAGE / "gateway" / "dialects"
    stems = sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "interface"))
    dialects = [s for s in stems if not any(s.startswith(f"{other}_") for other in stems if other != s)]
    parts = sorted(set(stems) - set(dialects))
    assert parts, "the Responses API's output is a part of its dialect (responses_output.py)"
    implemented = []
    for stem in dialects:
        module = importlib.import_module(f"tito_audit.gateway.dialects.{stem}")
        classes = [
            c
            for _, c in inspect.getmembers(module, inspect.isclass)
            if issubclass(c, Dialect) and c is not Dialect and c.__module__ == module.__name__
        ]
        assert len(classes) == 1, f"dialects/{stem}.py implements Dialect {len(classes)} times (once, please)"
        assert not inspect.isabstract(classes[0]) and classes[0].path.startswith("/v1/"), stem
        implemented.append(classes[0])
    assert sorted(c.__name__ for c in implemented) == sorted(c.__name__ for c in DIALECTS)
    assert len({c.path for c in DIALECTS}) == len(DIALECTS)
    app = (PACKAGE / "gateway" / "app.py").read_text(encoding="utf-8")
    assert all(f"dialects.{stem}" not in app for stem in stems) and all(c.path not in app for c in DIALECTS)


def test_the_gateway_app_serves_every_dialect_at_its_path():
    pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
    from starlette.routing import Route

    from tito_audit.gateway.app import create_app
    from tito_audit.gateway.dialects import DIALECTS

    class Config:
        api_key = None
        max_request_bytes = 1

    class Stub:
        config = Config()

    routes = {r.path: r.methods for r in create_app(Stub()).routes if isinstance(r, Route)}  # type: ignore[arg-type]
    assert all("POST" in (routes.get(c.path) or ()) for c in DIALECTS)
    # the paths clients call, written out (not read from DIALECTS): OpenAI's chat and Responses, Anthropic's messages
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
        assert "POST" in (routes.get(path) or ()), path


AUDIT_PUBLIC_ENTRY = "tito_audit.audit.public"
"""The audit's public entry for a loop at run time: the one module of the audit the session imports."""


def test_the_session_reads_the_audit_only_through_its_public_entry():
    """Every module of ``session/`` imports the audit through :data:`AUDIT_PUBLIC_ENTRY` alone (no step, no check, no
    orchestrator by its own path), and the entry offers exactly what the session reads: each of its names is used by a
    module of ``session/``."""
    modules = _modules()
    through = {
        name: sorted(target for target in _imports(name, path, modules) if _stage(target) == _stage("tito_audit.audit"))
        for name, path in modules.items()
        if name.startswith("tito_audit.session")
    }
    assert {name: targets for name, targets in through.items() if set(targets) - {AUDIT_PUBLIC_ENTRY}} == {}
    assert any(targets for targets in through.values()), "session/ reads the audit through its public entry"
    public = ast.parse(modules[AUDIT_PUBLIC_ENTRY].read_text(encoding="utf-8"))
    (exported,) = [
        ast.literal_eval(node.value)
        for node in public.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
    ]
    read = {
        alias.name
        for name, path in modules.items()
        if name.startswith("tito_audit.session.")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == AUDIT_PUBLIC_ENTRY
        for alias in node.names
    }
    assert sorted(exported) == sorted(read), "the public entry offers what session/ reads, no more, no less"
