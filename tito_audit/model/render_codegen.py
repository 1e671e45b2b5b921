"""The guarded template's compiled code: what the render guard (:mod:`tito_audit.model.render_guard`) changes in
the Python code Jinja writes for a template.

- Every loop iteration starts with a tick of the current thread's budget, counted in place (the budget is read once
  per loop): a loop whose body calls nothing still stops at the time limit.
- ``a ~ b`` goes through ``environment.tito_audit_join`` and ``{{ value }}`` of anything but a string or an integer
  through ``environment.tito_audit_text``: both check the text's length before they make it (a list of shared lists
  writes gigabytes).
- A slice goes through ``environment.tito_audit_made`` (what it copies is counted); ``+`` of a number is computed in
  place, ``+`` of a short written string is made and then counted; any other ``+`` goes through ``call_binop``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2.nodes

SHORT = 4096
"""A string this short is made before it is counted (checking it first would cost more than making it)."""


def checking_code_generator() -> type:
    """A Jinja code generator that starts every loop body (each iteration) with a tick of the current thread's
    budget (macros recurse through ``environment.call``, counted already), joins ``~`` through
    ``environment.tito_audit_join`` and writes ``{{ value }}`` through ``environment.tito_audit_text`` (both check
    the text's length before they make it)."""
    from jinja2 import nodes as jn
    from jinja2.compiler import CodeGenerator, Frame

    class CheckingCodeGenerator(CodeGenerator):
        _loop_bodies: set[int] | None = None

        def visit_For(self, node: jn.For, frame: Frame) -> None:
            if self._loop_bodies is None:
                self._loop_bodies = set()
            self._loop_bodies.add(id(node.body))
            # the budget read once per loop, its ticks counted in place in each iteration (no call)
            self.writeline("_tito_budget = environment.tito_audit_budget()")
            super().visit_For(node, frame)

        def blockvisit(self, nodes: Iterable[jn.Node], frame: Frame) -> None:
            if self._loop_bodies is not None and id(nodes) in self._loop_bodies:
                self.writeline("if _tito_budget is not None:")
                self.indent()
                self.writeline("_tito_budget.ticks -= 1")
                self.writeline("if _tito_budget.ticks < 0:")
                self.indent()
                self.writeline("_tito_budget.look()")
                self.outdent(2)
            super().blockvisit(nodes, frame)

        def visit_Concat(self, node: jn.Concat, frame: Frame) -> None:
            if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:
                super().visit_Concat(node, frame)
                return
            self.write("environment.tito_audit_join((")
            for argument in node.nodes:
                self.visit(argument, frame)
                self.write(", ")
            self.write("))")

        def _output_child_pre(self, node: jn.Expr, frame: Frame, finalize: CodeGenerator._FinalizeInfo) -> None:
            if frame.eval_ctx.volatile or frame.eval_ctx.autoescape or finalize.src is not None:
                super()._output_child_pre(node, frame, finalize)
                return
            # a string or an integer (the common cases) is written without a call; any other value through the guard
            self.write("(_tito_text if type(_tito_text := ")

        def _output_child_post(self, node: jn.Expr, frame: Frame, finalize: CodeGenerator._FinalizeInfo) -> None:
            if frame.eval_ctx.volatile or frame.eval_ctx.autoescape or finalize.src is not None:
                super()._output_child_post(node, frame, finalize)
                return
            self.write(
                ") is str else str(_tito_text) if type(_tito_text) is int else environment.tito_audit_text(_tito_text))"
            )

        def visit_Getitem(self, node: jn.Getitem, frame: Frame) -> None:
            from jinja2 import nodes

            if not isinstance(node.arg, nodes.Slice):
                super().visit_Getitem(node, frame)
                return
            # a slice copies: what it makes is counted (an item read is not)
            self.write("environment.tito_audit_made(")
            super().visit_Getitem(node, frame)
            self.write(")")

        def visit_Add(self, node: jn.BinExpr, frame: Frame) -> None:
            # a number added (``loop.index + 1``) cannot make a sequence: computed in place, not through call_binop;
            # text added to a written string (``'<|im_start|>' + role``) grows by that string only: made, then
            # counted (and its length checked) at once
            number = _is_number(node.left) or _is_number(node.right)
            if not number and not (_is_text(node.left) or _is_text(node.right)):
                super().visit_Add(node, frame)
                return
            self.write("(" if number else "environment.tito_audit_made(")
            self.visit(node.left, frame)
            self.write(" + ")
            self.visit(node.right, frame)
            self.write(")")

    return CheckingCodeGenerator


def _is_number(node: jinja2.nodes.Node) -> bool:
    from jinja2 import nodes

    return isinstance(node, nodes.Const) and type(node.value) in (int, float)


def _is_text(node: jinja2.nodes.Node) -> bool:
    from jinja2 import nodes

    return isinstance(node, nodes.Const) and type(node.value) is str and len(node.value) <= SHORT
