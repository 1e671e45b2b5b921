"""Whether two versions of a template render alike for settings of their free variables: the fold's last check."""

from __future__ import annotations

ASSIGNMENTS = 16
"""Settings of a template's free variables tried by :func:`renders_alike` (every one when there are fewer)."""


def renders_alike(before: str, after: str, seconds: float = 2.0) -> bool:
    """Whether ``after`` renders as ``before`` for the settings of their free variables tried here: each variable
    true or false (every combination up to four variables, else :data:`ASSIGNMENTS` of them). A setting that
    ``before`` refuses is skipped; one that only ``after`` refuses, or renders differently, is a difference. Chat
    templates read ``messages`` too, so this catches what a fold does to the text around its tags, not every
    render; the fix search renders every variant of the real conversations as well.

    >>> renders_alike("{% if true %}\\n  Z\\n{% endif %}X", "  Z\\nX"), renders_alike("{% if a %}Y{% endif %}", "")
    (True, False)
    """
    from jinja2 import meta

    from tito_audit.model.render import guarded_template
    from tito_audit.model.render_guard import deadline

    try:
        # compiled with the render guard, as every render of a template is: the deadline below holds only there
        first, second = guarded_template(before), guarded_template(after)
        names = sorted(meta.find_undeclared_variables(first.environment.parse(before)))
    except Exception:
        return False
    for number in range(min(2 ** len(names), ASSIGNMENTS)):
        values = {name: bool((number >> (i % 4)) & 1) ^ (i >= 4 and i % 2 == 1) for i, name in enumerate(names)}
        try:
            with deadline(seconds):
                expected = first.render(**values)
        except Exception:
            continue
        try:
            with deadline(seconds):
                if second.render(**values) != expected:
                    return False
        except Exception:
            return False
    return True
