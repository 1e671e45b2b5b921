"""The few HTML helpers the pages share: escaping and the document around a page's body.

Everything that reaches a page from data (model ids, template text, message text, reasons) goes through
:func:`esc`; the helpers never take markup from data.
"""

from __future__ import annotations

import html

from tito_audit.formatters.site.style import CSS


def esc(value: object) -> str:
    """``value`` as text safe in element content and in quoted attribute values."""
    return html.escape(str(value), quote=True)


def attrs(**values: object) -> str:
    """`` name="value"`` pairs (escaped) for the keyword arguments that are not None; ``class_`` → ``class``,
    ``data_x`` → ``data-x``."""
    parts = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        key = name.rstrip("_").replace("_", "-")
        parts.append(f" {key}" if value is True else f' {key}="{esc(value)}"')
    return "".join(parts)


def document(title: str, body: str, script: str = "") -> str:
    """A whole page: inline CSS (light and dark), the body, and an optional inline script (no network)."""
    tail = f"<script>\n{script.strip()}\n</script>\n" if script else ""
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f"<title>{esc(title)}</title>\n<style>\n{CSS.strip()}\n</style>\n</head>\n<body>\n"
        f"{body.strip()}\n{tail}</body>\n</html>\n"
    )
