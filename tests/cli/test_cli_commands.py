"""The ``pooltree`` command loads a command's module only when that command runs (``pooltree.cli.app.COMMANDS``):
the map names every registered command, and a process running one command has not imported the others'."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import typer.main
from typer.testing import CliRunner

from pooltree.cli import app
from pooltree.cli.app import COMMANDS


def test_the_map_names_every_registered_command_and_its_module() -> None:
    for module in set(COMMANDS.values()):
        importlib.import_module(module)
    registered = {info.name for info in app.registered_commands} | {
        info.name for info in app.registered_groups
    }
    assert registered == set(COMMANDS)
    group = typer.main.get_command(app)
    for name, module in COMMANDS.items():
        command = group.get_command(None, name)  # type: ignore[attr-defined, arg-type]
        subcommands = getattr(command, "commands", None)  # a group (``workload``): its commands' callbacks
        callbacks = (
            [command.callback] if subcommands is None else [sub.callback for sub in subcommands.values()]
        )
        assert callbacks and all(callback.__module__ == module for callback in callbacks), (name, module)


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    listed = [
        line.split()[1]
        for line in result.stdout.splitlines()
        if line.startswith("│ ") and len(line.split()) > 2
    ]
    assert [name for name in listed if name in COMMANDS] == list(COMMANDS)


def test_a_mistyped_command_gets_its_suggestion_in_a_fresh_process() -> None:
    """``pooltree simulat`` as a user runs it: nothing but the app was imported, yet the suggestion names the
    command (typer suggests from the commands registered so far; the test above ran after others had loaded them)."""
    result = subprocess.run(
        [sys.executable, "-m", "pooltree.cli", "simulat"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 2, result.stderr
    assert "No such command 'simulat'" in result.stderr, result.stderr
    assert "Did you mean 'simulate'?" in result.stderr, result.stderr


def _modules_after(*args: str) -> set[str]:
    """The ``pooltree.cli`` modules a real ``python -m pooltree.cli ARGS`` process had imported when it exited."""
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(' '.join(m for m in sys.modules if m.startswith('pooltree.cli')),"
        " file=sys.stderr))\n"
        "sys.argv = ['pooltree', *sys.argv[1:]]\n"
        "from pooltree.cli import main\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return set(result.stderr.split())


def test_a_command_imports_only_its_own_module() -> None:
    others = {
        "pooltree.cli.live",
        "pooltree.cli.fair_share",
        "pooltree.cli.simulate",
        "pooltree.cli.forecast",
    }
    loaded = _modules_after("node", "--help")
    assert "pooltree.cli.node" in loaded
    assert not loaded & others, loaded
    assert others | {"pooltree.cli.node"} <= _modules_after("--help")


def test_a_mistyped_command_is_refused_with_a_suggestion() -> None:
    result = CliRunner().invoke(app, ["simulat"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "No such command" in result.output and "simulate" in result.output, result.output
