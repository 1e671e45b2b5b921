"""Template keyword arguments, found from the template source, and the variants to audit.

A variable the template reads but never defines is an input. The inputs that are not the standard
ones (``messages``, ``tools``, ``add_generation_prompt``, the special tokens, the functions
transformers provides) are the template's own keyword arguments. Those it tests for truth or compares
with constants (``enable_thinking is false``, ``reasoning_effort == "high"``) change its behaviour:
each value they are tested against becomes a variant. Inputs it only prints (``date_string``) are
listed but not varied.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import jinja2
from jinja2 import meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tito_audit.model.render_budget import RenderLimits
from tito_audit.model.render_constants import refuse_constants
from tito_audit.model.render_guard import compile_guarded
from tito_audit.model.setting_types import (
    compared_constants,
    concatenated_names,
    integer_neighbours,
    literal_alternatives,
    sources_of,
    value_aliases,
)
from tito_audit.model.threads import imported

STANDARD_INPUTS = frozenset(
    {
        "messages",
        "tools",
        "documents",
        "add_generation_prompt",
        "continue_final_message",
        "raise_exception",
        "strftime_now",
        "range",
        "namespace",
        "dict",
        "bos_token",
        "eos_token",
        "unk_token",
        "pad_token",
        "sep_token",
        "cls_token",
        "mask_token",
        "additional_special_tokens",
        "custom_tools",
    }
)
"""Inputs every caller or transformers itself provides; never template-specific switches."""

DEFAULT = "default"
MAX_VALUES_PER_KWARG = 4


@dataclass(frozen=True)
class TemplateInput:
    name: str
    tested: bool
    """Used in a condition (truth test, ``is true``/``is false``/``is defined``, comparison)."""
    values: tuple[Any, ...]
    """Values that change the template's path: booleans for truth tests, constants it is compared with."""


@dataclass(frozen=True)
class Variant:
    """One setting of the template's keyword arguments; ``name`` is stable and readable."""

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def jinja_environment() -> jinja2.Environment:
    """The sandboxed environment transformers renders chat templates with (same extensions and filters)."""
    try:
        return imported("transformers.utils.chat_template_utils")._compile_jinja_template("").environment
    except Exception:  # pragma: no cover - older transformers without this helper
        return ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )


def parse_template(source: str) -> nodes.Template:
    return jinja_environment().parse(source)


def template_inputs(
    source: str, special_token_names: Iterable[str] = (), limits: RenderLimits | None = None
) -> list[TemplateInput]:
    """The template's own keyword arguments, sorted by name. A constant expression too big to compute under
    ``limits`` is refused first (:class:`~tito_audit.errors.TemplateTimeoutError`): Jinja's ``meta`` computes
    them as the compiler does.

    >>> [i.name for i in template_inputs("{% if enable_thinking is false %}x{% endif %}{{ messages }}")]
    ['enable_thinking']
    """
    refuse_constants(source, limits)
    ast = parse_template(source)
    undeclared = meta.find_undeclared_variables(ast) - STANDARD_INPUTS - set(special_token_names)
    assigned = _assigned_names(ast)
    defaulted = _defaulted_names(ast)
    # Jinja's scoping reports variables set inside blocks as undeclared; a name the template assigns
    # itself is internal unless it also guards the name with `is defined` or `|default` (a default).
    names = {n for n in undeclared if not n.endswith("_token") and (n not in assigned or n in defaulted)}
    tested: dict[str, set[Any]] = {n: set() for n in names}
    named: dict[str, set[Any]] = {n: set() for n in names}
    """The constants each input is compared with, without the values one past a threshold."""
    truthy: set[str] = set()
    integers: set[str] = set()
    """Integer settings with a default of the template's own: swept at it and its neighbours, never as booleans."""
    aliases = value_aliases(ast, names)

    def read(expr: nodes.Node) -> set[str]:
        """The inputs whose value ``expr`` holds, directly or through a local set from them."""
        return sources_of(expr, aliases) & names

    for node in ast.find_all((nodes.If, nodes.CondExpr, nodes.Not, nodes.And, nodes.Or, nodes.Test, nodes.Compare)):
        if isinstance(node, (nodes.If, nodes.CondExpr)):
            truthy.update(read(node.test))
        elif isinstance(node, nodes.Not):
            truthy.update(read(node.node))
        elif isinstance(node, (nodes.And, nodes.Or)):
            truthy.update(read(node.left) | read(node.right))
        elif isinstance(node, nodes.Test):
            if node.name in {"true", "false", "sameas"}:
                for name in read(node.node):
                    tested[name].update({True, False})
                    truthy.add(name)
        elif isinstance(node, nodes.Compare):
            for name, consts in compared_constants(node, aliases).items():
                if name in tested and consts:
                    tested[name].update(consts)
                    truthy.add(name)
            for name, consts in compared_constants(node, aliases, one_past=False).items():
                if name in named:
                    named[name].update(consts)
    # read as text (added to a string): only strings; the constants the template falls back to are its own values
    concatenated = concatenated_names(ast, aliases) & names
    for name, alternatives in literal_alternatives(ast, aliases).items():
        if name not in truthy:  # only a setting that changes the template's path is swept
            continue
        kinds = {_kind(v) for v in tested[name]} | ({"text"} if name in concatenated else set())
        tested[name].update(v for v in alternatives if _kind(v) in kinds)
        defaults = {v for v in alternatives if _integer(v)}
        if defaults and tested[name] and all(_integer(v) for v in tested[name]):
            tested[name] = integer_neighbours(defaults, {v for v in named[name] if _integer(v)})
            integers.add(name)
    for name in concatenated:
        tested[name] = {v for v in tested[name] if isinstance(v, str)}
    structured = _structured_names(ast)
    inputs = []
    for name in sorted(names):
        if name in structured or name in concatenated:
            tested[name] = {v for v in tested[name] if not isinstance(v, bool)}
            if not tested[name]:
                truthy.discard(name)
        values = set(tested[name])
        if name in truthy and name not in integers and not values - {True, False}:
            values |= {True, False}
        ordered = sorted(values, key=lambda v: (type(v).__name__, str(v)))[:MAX_VALUES_PER_KWARG]
        inputs.append(TemplateInput(name=name, tested=name in truthy, values=tuple(ordered)))
    return inputs


def _integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: object) -> str:
    """``text``, ``number`` or ``boolean``: the values of one kind a setting is read as."""
    if isinstance(value, bool):
        return "boolean"
    return "text" if isinstance(value, str) else "number"


def _assigned_names(ast: nodes.Template) -> set[str]:
    names: set[str] = set()
    targets: list[nodes.Node] = [assign.target for assign in ast.find_all(nodes.Assign)]
    targets += [block.target for block in ast.find_all(nodes.AssignBlock)]
    targets += [loop.target for loop in ast.find_all(nodes.For)]
    targets += [arg for macro in ast.find_all(nodes.Macro) for arg in macro.args]
    for target in targets:
        names.update(n.name for n in [target, *target.find_all(nodes.Name)] if isinstance(n, nodes.Name))
    return names


def _structured_names(ast: nodes.Template) -> set[str]:
    """Names used as data (iterated, indexed, filtered, printed, concatenated, copied), not on/off switches."""
    names: set[str] = set()
    for loop in ast.find_all(nodes.For):
        iterated = [loop.iter, *loop.iter.find_all(nodes.Name)]
        names.update(n.name for n in iterated if isinstance(n, nodes.Name))
    lookups: list[nodes.Getattr | nodes.Getitem] = [*ast.find_all(nodes.Getattr), *ast.find_all(nodes.Getitem)]
    for lookup in lookups:
        if isinstance(lookup.node, nodes.Name):
            names.add(lookup.node.name)
    for filtered in ast.find_all(nodes.Filter):
        if filtered.name not in {"default", "d"} and isinstance(filtered.node, nodes.Name):
            names.add(filtered.node.name)
    for call in ast.find_all(nodes.Call):
        names.update(arg.name for arg in call.args if isinstance(arg, nodes.Name))
    # printed, concatenated or copied: a value (a date, a list of tools), not an on/off switch
    for output in ast.find_all(nodes.Output):
        names.update(child.name for child in output.nodes if isinstance(child, nodes.Name))
    operands = [operand for concat in ast.find_all(nodes.Concat) for operand in concat.nodes]
    operands += [operand for add in ast.find_all(nodes.Add) for operand in (add.left, add.right)]
    names.update(operand.name for operand in operands if isinstance(operand, nodes.Name))
    for assign in ast.find_all(nodes.Assign):
        if isinstance(assign.node, nodes.Name):
            names.add(assign.node.name)
    for compare in ast.find_all(nodes.Compare):
        for op in compare.ops:
            if op.op in {"in", "notin"} and isinstance(op.expr, nodes.Name):
                names.add(op.expr.name)
    return names


def _defaulted_names(ast: nodes.Template) -> set[str]:
    names: set[str] = set()
    for test in ast.find_all(nodes.Test):
        if test.name in {"defined", "undefined"} and isinstance(test.node, nodes.Name):
            names.add(test.node.name)
    for filtered in ast.find_all(nodes.Filter):
        if filtered.name in {"default", "d"} and isinstance(filtered.node, nodes.Name):
            names.add(filtered.node.name)
    return names


def format_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def variants_for(inputs: Iterable[TemplateInput], pinned: Mapping[str, Any] | None = None) -> list[Variant]:
    """The default variant plus one variant per (tested input, value); pinned inputs are fixed in all.

    >>> [v.name for v in variants_for([TemplateInput("enable_thinking", True, (False, True))])]
    ['default', 'enable_thinking=false', 'enable_thinking=true']
    """
    pinned = dict(pinned or {})
    base_name = ",".join(f"{k}={format_value(v)}" for k, v in sorted(pinned.items())) or DEFAULT
    variants = [Variant(name=base_name, kwargs=dict(pinned))]
    for item in inputs:
        if not item.tested or item.name in pinned:
            continue
        for value in item.values:
            kwargs = {**pinned, item.name: value}
            name = ",".join(f"{k}={format_value(v)}" for k, v in sorted(kwargs.items()))
            variants.append(Variant(name=name, kwargs=kwargs))
    return variants


def parse_kwarg(text: str) -> tuple[str, Any]:
    """``name=value`` with the value read as JSON when it parses (``true``, ``3``, ``"x"``), else a string."""
    if "=" not in text:
        raise ValueError(f"--kwarg expects name=value, got '{text}'")
    name, raw = text.split("=", 1)
    name = name.strip()
    if not name.isidentifier():
        raise ValueError(f"--kwarg name '{name}' is not an identifier")
    _check_unicode(name, raw)
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    except RecursionError:
        raise ValueError(f"--kwarg {name}: JSON nested too deeply to read (RecursionError)") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"--kwarg {name}: {raw} is not a valid value (NaN and infinities are refused)")
    _check_value(name, value)
    return name, value


MAX_KWARG_DEPTH = 64
"""The deepest a ``--kwarg`` value may nest (lists and objects): what a conversation's data may."""


def _check_unicode(name: str, text: str) -> None:
    """Refuse text that is not Unicode a tokenizer can take: bytes that are not UTF-8 (Python reads them from the
    command line as lone surrogates) or a lone surrogate written out."""
    for index, character in enumerate(text):
        if 0xD800 <= ord(character) <= 0xDFFF:
            what = (
                f"a byte 0x{ord(character) - 0xDC00:02X} that is not UTF-8"
                if 0xDC80 <= ord(character) <= 0xDCFF
                else f"a lone surrogate U+{ord(character):04X}"
            )
            raise ValueError(f"--kwarg {name}: the value is not valid text ({what} at character {index})")


def _check_value(name: str, value: Any) -> None:
    """Refuse a value nested deeper than :data:`MAX_KWARG_DEPTH` or holding text that is not valid Unicode (a JSON
    escape of a lone surrogate)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_unicode(name, item)
        elif isinstance(item, (list, dict)):
            if depth >= MAX_KWARG_DEPTH:
                raise ValueError(f"--kwarg {name}: the value is nested deeper than {MAX_KWARG_DEPTH} levels")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def format_kwarg(name: str, value: Any) -> str:
    """``name=value`` that :func:`parse_kwarg` reads back as ``value``: JSON, or a string as it is when JSON would
    not read it as something else."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            return f"{name}={value}"
    return f"{name}={json.dumps(value, ensure_ascii=False)}"


def check_syntax(source: str) -> str | None:
    """None when the template parses and compiles, else a one-line description of why not: a syntax error, or
    nesting deeper than Jinja's parser reads or than the Python code Jinja writes for it may be (a hundred levels
    of indentation, twenty nested loops)."""
    try:
        compile_guarded(source)
    except jinja2.TemplateSyntaxError as exc:
        return f"line {exc.lineno}: {exc.message}"
    except RecursionError:
        return "nested deeper than Jinja's parser reads (RecursionError)"
    except SyntaxError as exc:  # IndentationError too: the Python Jinja writes for the template
        return f"nested deeper than Python compiles ({type(exc).__name__}: {exc.msg})"
    return None


MAX_COMBINATIONS = 12
"""Variants made of two settings at most (a template reading many inputs together would otherwise multiply them)."""
