"""The ``pooltree`` command: thin shells over the one core, one module per command group.

Each module registers its commands on :data:`pooltree.cli.app.app` when imported; the app imports a command's
module when the command runs (``pooltree.cli.app.COMMANDS``; ARCHITECTURE.md says why).
"""

from __future__ import annotations

from pooltree.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``pooltree`` console script."""
    app()
