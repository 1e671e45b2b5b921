"""Where a model page's neighbours are: the matrix's front page, the report files, the way-out pages."""

from __future__ import annotations

from dataclasses import dataclass

from tito_audit.formatters.fix_report import FixPage


@dataclass(frozen=True)
class PageLinks:
    """Where the page's neighbours are, relative to it (None: not linked)."""

    index: str | None = None
    """The matrix's front page."""
    json: str | None = None
    markdown: str | None = None
    fix: str | None = None
    """The way-out page (Markdown)."""
    diff: str | None = None

    @classmethod
    def published(cls, stem: str, way_out: FixPage | None) -> PageLinks:
        """The links of a page in ``reports/models/`` (the way-out files in ``reports/fixes/``)."""
        return cls(
            index="../index.html",
            json=f"{stem}.json",
            markdown=f"{stem}.md",
            fix=f"../fixes/{stem}.md" if way_out is not None else None,
            diff=f"../fixes/{stem}.diff" if way_out is not None and way_out.diff is not None else None,
        )
