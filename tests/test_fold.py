"""Constant folding of patched templates (``tito_audit.repair.fixes.fold``): the folded template renders exactly
as the unfolded one, whatever its branches and whitespace control."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_audit.model.variants import jinja_environment
from tito_audit.repair.fixes.fold import fold

TESTS = ["true", "false", "a", "b", "not a", "a and true", "false or b", "(a or true)", "not (b and false)", "a and a"]
TEXTS = ["X", " Y ", "\n  Z\n", "", "{{ c }}", "\n"]


def _tag(body: str, left: str, right: str) -> str:
    return "{%" + left + " " + body + " " + right + "%}"


@st.composite
def templates(draw, depth: int = 0) -> str:
    """A template of text and if/elif/else chains with random tests and whitespace control."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        if depth < 2 and draw(st.booleans()):
            strip = [draw(st.sampled_from(["", "-"])) for _ in range(2)]
            chain = _tag("if " + draw(st.sampled_from(TESTS)), *strip) + draw(templates(depth + 1))
            for _ in range(draw(st.integers(0, 2))):
                strip = [draw(st.sampled_from(["", "-"])) for _ in range(2)]
                chain += _tag("elif " + draw(st.sampled_from(TESTS)), *strip) + draw(templates(depth + 1))
            if draw(st.booleans()):
                chain += _tag("else", *[draw(st.sampled_from(["", "-"])) for _ in range(2)]) + draw(
                    st.sampled_from(TEXTS)
                )
            chain += _tag("endif", *[draw(st.sampled_from(["", "-"])) for _ in range(2)])
            parts.append(draw(st.sampled_from(["", " ", "\n", "\n    "])) + chain)
        else:
            parts.append(draw(st.sampled_from(TEXTS)))
    return "".join(parts)


def _render(source: str, **values) -> str:
    return jinja_environment().from_string(source).render(**values)


@settings(max_examples=300, deadline=None)
@given(source=templates(), a=st.booleans(), b=st.booleans(), c=st.sampled_from(["", "v"]))
def test_folded_templates_render_the_same(source, a, b, c):
    folded = fold(source)
    assert _render(folded, a=a, b=b, c=c) == _render(source, a=a, b=b, c=c), (source, folded)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{%- if m.x and true %}A{%- endif %}", "{%- if m.x %}A{%- endif %}"),
        ("{%- if true %}\n    {{- x }}\n{%- endif %}", "    {{- x }}"),
        ("{%- if x %}A{%- elif false %}B{%- else %}C{%- endif %}", "{%- if x %}A{%- else %}C{%- endif %}"),
        ("{%- if x %}A{%- elif true and true %}B{%- endif %}", "{%- if x %}A{%- else %}B{%- endif %}"),
        ("{%- if false %}A{%- elif y %}B{%- endif %}", "{%- if y %}B{%- endif %}"),
        ("{%- set keep = not (t and false) %}", "{%- set keep = true %}"),
        ("{%- if (a or true) and (r or m.r is string) %}T{% endif %}", "{%- if r or m.r is string %}T{% endif %}"),
        ("{%- if a is string and a is string and true %}Z{% endif %}", "{%- if a is string %}Z{% endif %}"),
        ("{{ x if true else y }}", "{{ x if true else y }}"),  # an inline if is left as it is
        ("{%- if (a and b) or not(c) %}X{% endif %}", "{%- if (a and b) or not(c) %}X{% endif %}"),  # no constant
        # the lines of the tags go when nothing they strip is needed: the body keeps its own line
        ("A\n{%- if true %}\n    {{- x }}\n{%- endif %}\n{{- y }}", "A\n    {{- x }}\n{{- y }}"),
    ],
)
def test_what_a_person_would_write(source, expected):
    assert fold(source) == expected


def test_a_template_that_does_not_lex_is_left_alone():
    assert fold("{% if true %}unclosed") == "{% if true %}unclosed"


def test_nothing_constant_is_left_in_offered_fixes(tiny_model_dir, write_template):
    """The published way out of a template whose fix pins ``loop.last``: no ``if true``/``elif false``/``and true``
    in the offered template, and the page says it was folded."""
    from tests import templates
    from tests.helpers import load
    from tito_audit.audit.service import AuditOptions, audit
    from tito_audit.repair.fixes.search import search_fix

    model = load(tiny_model_dir, write_template("multi", templates.MULTILINE_EMPTY_THINK))
    options = AuditOptions(count=24)
    outcome = search_fix(model, audit(model, options), options, audit)
    assert outcome.offered and outcome.folded and outcome.patched_source is not None
    assert not re.search(
        r"\b(if|elif) (true|false)\b|\band (true|false)\b|\b(true|false) (and|or)\b", outcome.patched_source
    )
    assert outcome.changed_lines >= 1


def test_the_last_check_of_a_fold_holds_the_render_time_limit():
    """A template that never ends (a nested loop whose body calls nothing) is stopped by the render time limit in
    the fold's own check, as in every other render: the check returns, it does not hold the thread."""
    import threading

    from tito_audit.repair.fixes.alike import renders_alike

    endless = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}{% if true %}A{% endif %}"
    done: list[bool] = []
    worker = threading.Thread(target=lambda: done.append(renders_alike(endless, endless, seconds=0.2)), daemon=True)
    worker.start()
    worker.join(30)
    assert done, "renders_alike ran past 30 s on a template the render limit stops in 0.2 s"
