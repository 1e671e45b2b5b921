"""Which template source lines wrote which characters of a render.

The template is parsed with the same sandboxed environment transformers uses, and every expression it
outputs is wrapped in a call that surrounds the value with invisible markers naming its source line.
Rendering the instrumented copy and reading the markers back gives, for every character of the output,
the innermost line that produced it (a macro's lines inside the line that calls it). The markers are
then removed; if the result is not byte-identical to the template's own render (a template that post-
processes its own output could be confused by them), attribution is reported as unavailable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes

from tito_audit.model.render_guard import TEMPLATE_UTILS
from tito_audit.model.threads import imported

OPEN, SEPARATOR, CLOSE = "\ue000", "\ue001", "\ue002"
EMIT = "tito_emit_line"


@dataclass(frozen=True)
class SourceLine:
    number: int
    text: str
    reads: tuple[str, ...]
    """Variables, attributes, filters and functions the line uses (``loop.last``, ``|tojson``, ``strftime_now()``)."""


@dataclass
class AttributedRender:
    text: str
    owners: list[int]
    """Source line of each character (0 where no instrumented expression wrote it)."""

    def lines_at(self, start: int, end: int | None = None) -> list[int]:
        end = start + 1 if end is None else end
        return sorted({line for line in self.owners[max(0, start) : max(start + 1, end)] if line})


def _dotted(node: nodes.Node) -> str | None:
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.Getattr):
        base = _dotted(node.node)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
        base = _dotted(node.node)
        return f"{base}.{node.arg.value}" if base else None
    return None


def _reads_by_line(ast: nodes.Template) -> dict[int, set[str]]:
    reads: dict[int, set[str]] = {}
    for node in ast.find_all((nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Filter, nodes.Test, nodes.Call)):
        line = getattr(node, "lineno", 0)
        item: str | None
        if isinstance(node, nodes.Filter):
            item = f"|{node.name}"
        elif isinstance(node, nodes.Test):
            item = f"is {node.name}"
        elif isinstance(node, nodes.Call):
            callee = _dotted(node.node)
            item = f"{callee}()" if callee else None
        else:
            item = _dotted(node)
            if isinstance(node, nodes.Name) and node.ctx != "load":
                item = None
        if item and item != EMIT:
            reads.setdefault(line, set()).add(item)
    return reads


class TemplateAttributor:
    """Renders a template with source-line attribution of every output character."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.environment = imported(TEMPLATE_UTILS)._compile_jinja_template(source).environment
        ast = self.environment.parse(source)
        self._reads = _reads_by_line(ast)
        self._conditions: dict[int, list[int]] = {}
        _collect_conditions(ast, [], self._conditions)
        self._assignments: dict[str, list[int]] = {}
        for assign in ast.find_all(nodes.Assign):
            if isinstance(assign.target, nodes.Name):
                self._assignments.setdefault(assign.target.name, []).append(assign.lineno)
        self._printed = {
            child.lineno: child.name
            for output in ast.find_all(nodes.Output)
            for child in output.nodes
            if isinstance(child, nodes.Name)
        }
        for output in ast.find_all(nodes.Output):
            output.nodes = [
                nodes.Call(
                    nodes.Name(EMIT, "load"), [nodes.Const(child.lineno), child], [], None, None, lineno=child.lineno
                )
                for child in output.nodes
            ]
        code = self.environment.compile(ast)
        self.template = self.environment.template_class.from_code(
            self.environment, code, self.environment.make_globals(None)
        )
        self.lines = source.splitlines()

    def conditions(self, number: int) -> list[int]:
        """Lines of the ``if``/``for`` tags that enclose the output on line ``number`` (outermost first)."""
        return self._conditions.get(number, [])

    def line(self, number: int) -> SourceLine:
        text = self.lines[number - 1] if 0 < number <= len(self.lines) else ""
        reads = sorted(item for item in self._reads.get(number, ()) if not item.startswith(("tito_", "is ")) or item)
        return SourceLine(number, text, tuple(reads))

    def assignment_before(self, number: int) -> int | None:
        """When line ``number`` prints a bare variable (``{{ args_value }}``), the last line before it that sets that
        variable (where the printed value was made: ``{% set args_value = args_value | string %}``)."""
        name = self._printed.get(number)
        earlier = [line for line in self._assignments.get(name or "", []) if line < number]
        return max(earlier) if earlier else None

    def lines_emitting(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict] | None,
        gp: bool,
        template_kwargs: Mapping[str, Any],
        needle: str,
    ) -> list[int]:
        """The source lines whose output held ``needle``, in the order they were written (a macro's line before the
        line printing the macro's result). The output itself is left as it is, so a template that trims or compares
        its own output (where :meth:`render`'s markers would change its path) renders as usual."""
        utils = imported(TEMPLATE_UTILS)
        _alias_reasoning_fields, _plain_template_data = utils._alias_reasoning_fields, utils._plain_template_data

        found: list[int] = []

        def emit(line: int, value: Any) -> Any:
            if line not in found and needle in str(value):
                found.append(line)
            return value

        chat = _alias_reasoning_fields(
            _plain_template_data([{k: v for k, v in m.items() if v is not None} for m in messages])
        )
        try:
            self.template.render(
                messages=chat,
                tools=_plain_template_data(tools),
                documents=None,
                add_generation_prompt=gp,
                **_plain_template_data(dict(template_kwargs)),
                **{EMIT: emit},
            )
        except Exception:
            return []
        return found

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict] | None,
        gp: bool,
        template_kwargs: Mapping[str, Any],
        expected: str | None = None,
    ) -> AttributedRender | None:
        """The render with owners per character; None when it cannot be attributed faithfully."""
        utils = imported(TEMPLATE_UTILS)
        _alias_reasoning_fields, _plain_template_data = utils._alias_reasoning_fields, utils._plain_template_data

        def emit(line: int, value: Any) -> str:
            return f"{OPEN}{line}{SEPARATOR}{value}{CLOSE}"

        chat = _alias_reasoning_fields(
            _plain_template_data([{k: v for k, v in m.items() if v is not None} for m in messages])
        )
        try:
            raw = self.template.render(
                messages=chat,
                tools=_plain_template_data(tools),
                documents=None,
                add_generation_prompt=gp,
                **_plain_template_data(dict(template_kwargs)),
                **{EMIT: emit},
            )
        except Exception:
            return None
        text, owners = _strip_markers(raw)
        if text is None or (expected is not None and text != expected):
            return None
        return AttributedRender(text, owners)


def _collect_conditions(node: nodes.Node, enclosing: list[int], found: dict[int, list[int]]) -> None:
    """For each output line, the if/for tags around it (what decides whether and how it is written)."""
    if isinstance(node, nodes.Output):
        for written in node.nodes:
            found.setdefault(written.lineno, list(enclosing))
        return
    if isinstance(node, (nodes.If, nodes.For)):
        for child in node.iter_child_nodes():
            _collect_conditions(child, [*enclosing, node.lineno], found)
        return
    for child in node.iter_child_nodes():
        _collect_conditions(child, enclosing, found)


def _strip_markers(raw: str) -> tuple[str | None, list[int]]:
    out: list[str] = []
    owners: list[int] = []
    stack: list[int] = []
    position = 0
    while position < len(raw):
        char = raw[position]
        if char == OPEN:
            end = raw.find(SEPARATOR, position)
            if end < 0:
                return None, []
            try:
                stack.append(int(raw[position + 1 : end]))
            except ValueError:
                return None, []
            position = end + 1
            continue
        if char == CLOSE:
            if not stack:
                return None, []
            stack.pop()
            position += 1
            continue
        out.append(char)
        owners.append(stack[-1] if stack else 0)
        position += 1
    return ("".join(out), owners) if not stack else (None, [])
