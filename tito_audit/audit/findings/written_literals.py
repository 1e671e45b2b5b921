"""``value-rewritten`` (a finding): the template writes tool-call argument values in literals that are not JSON.

A call whose arguments hold ``False`` and ``None`` is rendered, and each value's literal located
(:func:`tito_audit.audit.parse_step.value_literals.locate_literal`); a literal that is no JSON spelling of its value
(Python's ``False`` and ``None`` where a template writes ``value | string``) is reported with the template line that
writes it. A model writing the JSON literal (``false``) then gets its value re-rendered in the template's (the rates are
in the variant's written values), and a parser may read the template's literal back as another value (``None`` as the
string ``"None"``).

Example (Qwen3.5)::

    the template writes boolean false as False, null as None (template line 122: {%- set args_value = ... | string %})
"""

from __future__ import annotations

from typing import Any

from tito_audit.audit.core.causes import value_rewritten
from tito_audit.audit.findings.finding_context import FindingContext, FindingRule
from tito_audit.audit.parse_step.value_literals import MARKER, json_literals, locate_literal, value_type, with_value
from tito_audit.audit.results import Finding
from tito_audit.conversations.conversation import ASSISTANT, USER, Message
from tito_audit.model.load_folder import JINJA
from tito_audit.model.render import RenderError

NAME = value_rewritten.NAME
PROBE_VALUES: dict[str, Any] = {"flag": False, "nothing": None, "ratio": 1.5, "count": 3}
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "probe_values",
            "description": "Probe tool.",
            "parameters": {
                "type": "object",
                "properties": {
                    "flag": {"type": "boolean"},
                    "nothing": {"type": ["string", "null"]},
                    "ratio": {"type": "number"},
                    "count": {"type": "integer"},
                },
            },
        },
    }
]


def _probe() -> list[Message]:
    call = {"id": "call_probe0001", "type": "function", "function": {"name": "probe_values", "arguments": PROBE_VALUES}}
    return [{"role": USER, "content": "Check the values."}, {"role": ASSISTANT, "content": "", "tool_calls": [call]}]


def find(context: FindingContext) -> list[Finding]:
    if context.model.backend != JINJA or context.model.template_source is None:
        return []
    messages = _probe()
    try:
        full = context.renderer.text(messages, _TOOLS, False)
    except RenderError:
        return []

    def render(marked: list[Message]) -> str | None:
        try:
            return context.renderer.text(marked, _TOOLS, False)
        except RenderError:
            return None

    written: list[tuple[str, str, str, tuple[int, int], str]] = []
    for name, value in PROBE_VALUES.items():
        span = locate_literal(full, messages, 1, (0, name), render)
        if span is None:
            continue
        literal = full[span[0] : span[1]]
        if literal not in json_literals(value):
            written.append((str(value_type(value)), json_literals(value)[0], literal, span, name))
    if not written:
        return []
    words = ", ".join(
        f"{kind if kind == json else f'{kind} {json}'} as {literal}" for kind, json, literal, *_ in written
    )
    return [
        Finding(
            NAME,
            f"the template writes tool-call argument values in literals that are not JSON ({words}): a model that "
            "writes the JSON literal gets the template's back in the next prompt, and a parser may read the "
            "template's literal as another value",
            evidence=_template_line(context, messages, written[0][4]),
        )
    ]


def _template_line(context: FindingContext, messages: list[Message], name: str) -> str:
    """The template line that writes argument ``name`` (found by rendering the probe with a marker as its value and
    tracing which output printed it; the same input has just rendered under the render guard, so this render, of the
    same template, ends too), with the line that made the printed variable when it prints a bare one."""
    from tito_audit.model.attribution import TemplateAttributor

    source = context.model.template_source
    assert source is not None
    marked = [*messages[:1], with_value(messages[1], 0, name, MARKER)]
    try:
        attributor = TemplateAttributor(source)
        kwargs = {**context.model.tokenizer.special_tokens_map, **context.renderer.kwargs}
        lines = attributor.lines_emitting(marked, _TOOLS, False, kwargs, MARKER)
    except Exception:  # attribution is evidence only: the finding stands without it
        lines = []
    if not lines:
        return "the template line could not be attributed"
    writer = lines[0]
    made = attributor.assignment_before(writer)
    shown = [made, writer] if made is not None else [writer]
    return "; ".join(f"template line {n}: {attributor.line(n).text.strip()}" for n in shown)


FINDING = FindingRule(NAME, find)
