"""The ``pooltree`` typer application that every command module registers on."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, help="pooltree: the YTsaurus scheduler model.")


@app.callback()
def _main() -> None:
    """pooltree: hierarchical fair-share pool trees, preemption, memory digests."""


def fail(message: str) -> NoReturn:
    """Print ``message`` as an error on stderr and exit with status 1."""
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    console.print("[bold red]error:[/] ", end="")
    console.print(message, markup=False)
    raise typer.Exit(code=1)
