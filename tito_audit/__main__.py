"""``python -m tito_audit``: the command line."""

from tito_audit.cli import main

main()
