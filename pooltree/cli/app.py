"""The ``pooltree`` typer application that every command module registers on."""

from __future__ import annotations

from typing import NoReturn

import typer
import typer.core
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, help="pooltree: the YTsaurus scheduler model.")

_display_type_rich = typer.core.TyperOption.display_type_rich


def _flag_type(self: typer.core.TyperOption, ctx: typer.core._click.Context) -> str | None:
    """Flags take no value: typer 0.29 with click 8.2+ would show ``<bool>`` after them in ``--help``."""
    if self.is_flag:
        return None
    return _display_type_rich(self, ctx)


typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"pooltree {version('pooltree')}")
        except PackageNotFoundError:
            typer.echo("pooltree (not installed: no version metadata)")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print pooltree's version and exit."
    ),
) -> None:
    """pooltree: hierarchical fair-share pool trees, preemption, memory digests."""


def fail(message: str) -> NoReturn:
    """Print ``message`` as an error on stderr and exit with status 1."""
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    console.print("[bold red]error:[/] ", end="")
    console.print(message, markup=False)
    raise typer.Exit(code=1)
