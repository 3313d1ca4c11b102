"""The ``pooltree`` command: thin shells over the one core, one module per command group.

Each module registers its commands on :data:`pooltree.cli.app.app` when imported here.
"""

from __future__ import annotations

from pooltree.cli import fair_share as _fair_share  # noqa: F401  (registers `fair-share`)
from pooltree.cli import forecast as _forecast  # noqa: F401  (registers `forecast`)
from pooltree.cli import live as _live  # noqa: F401  (registers `scheduler`, `node`, `local`)
from pooltree.cli import simulate as _simulate  # noqa: F401  (registers `simulate`, `workload`)
from pooltree.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``pooltree`` console script."""
    app()
