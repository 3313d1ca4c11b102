"""The ``pooltree`` typer application that every command module registers on.

A command's module is imported when that command runs (`COMMANDS`), so ``pooltree node`` does not load the
simulator's or the fair-share CLI's modules; ``--help`` and a mistyped command load them all.
"""

from __future__ import annotations

import importlib
from typing import NoReturn

import typer
import typer.core
import typer.main
from rich.console import Console

COMMANDS: dict[str, str] = {
    "fair-share": "pooltree.cli.fair_share",
    "forecast": "pooltree.cli.forecast",
    "scheduler": "pooltree.cli.live",
    "node": "pooltree.cli.node",
    "local": "pooltree.cli.live",
    "simulate": "pooltree.cli.simulate",
    "workload": "pooltree.cli.simulate",
}
"""Every top-level command and the module that registers it on `app` when imported (in ``--help``'s order)."""


class _LazyCommands(typer.core.TyperGroup):
    """The click group of `app`: it knows every command's name (`COMMANDS`) and imports a command's module the
    first time the command is looked up, then takes the command from `app`'s registrations."""

    def list_commands(self, ctx: typer.core._click.Context) -> list[str]:
        return list(dict.fromkeys([*COMMANDS, *super().list_commands(ctx)]))

    def get_command(self, ctx: typer.core._click.Context, cmd_name: str) -> typer.core._click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(module)
            self.commands.update(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: typer.core._click.Context, args: list[str]
    ) -> tuple[str | None, typer.core._click.Command | None, list[str]]:
        """typer suggests a close command name for a mistyped one from the commands registered so far: a name no
        command has loads every command's module first, so the suggestion (``Did you mean 'simulate'?``) is the
        same in a fresh process as after the commands were looked up (only on that error's path)."""
        if args and args[0] not in COMMANDS and self.suggest_commands:
            for module in dict.fromkeys(COMMANDS.values()):
                importlib.import_module(module)
            self.commands.update(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_LazyCommands,
    add_completion=False,
    no_args_is_help=True,
    help="pooltree: the YTsaurus scheduler model.",
)

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
