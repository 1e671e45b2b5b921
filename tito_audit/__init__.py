"""tito-audit: audit chat templates and tokenizers for token-in/token-out (TITO) safety."""

__version__ = "0.1.0"
