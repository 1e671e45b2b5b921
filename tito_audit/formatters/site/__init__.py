"""HTML pages of single audits: a model page (a report in, a self-contained page out) and the pieces the
matrix's front page shares with it (styles, token chips, glossary).

Self-contained and offline: the CSS and the little script they use are inline; no page loads anything.
"""

from tito_audit.formatters.site.links import PageLinks
from tito_audit.formatters.site.model_page import model_page

__all__ = ["PageLinks", "model_page"]
