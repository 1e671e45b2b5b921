"""HTML pages of the published matrix and of single audits: a front page (``index.html``) and a page per model.

Self-contained and offline: the CSS and the little script they use are inline; no page loads anything.
"""

from tito_audit.formatters.site.front_page import front_page
from tito_audit.formatters.site.model_page import PageLinks, model_page

__all__ = ["PageLinks", "front_page", "model_page"]
