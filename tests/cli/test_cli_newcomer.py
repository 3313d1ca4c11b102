"""A newcomer's first commands (issue 15): ``pooltree --version``, help without values flags do not take, and
``pooltree local --nodes N`` sharing the machine among its nodes instead of each claiming all of it."""

from __future__ import annotations

import re
from importlib.metadata import version

from typer.testing import CliRunner

from pooltree.cli import app
from pooltree.cli.live import split_machine
from pooltree.node.agent import detect_resource_limits
from pooltree.resources import RESOURCES


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"pooltree {version('pooltree')}"


def test_help_shows_no_value_for_flags() -> None:
    result = CliRunner().invoke(app, ["scheduler", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0
    flag_lines = [
        line for line in result.output.splitlines() if "--create-default-tree" in line or "--help" in line
    ]
    assert len(flag_lines) == 2 and not any("<bool>" in line for line in flag_lines), flag_lines
    assert re.search(r"--port\s+<int>", result.output)  # options that take a value still say which


def test_local_nodes_split_the_machine() -> None:
    total = detect_resource_limits(None)
    assert split_machine(1) is None  # one node: the whole machine, as detected
    text = split_machine(4)
    assert text is not None
    parts = dict(item.split("=") for item in text.split(","))
    assert float(parts["cpu"]) * 4 <= float(total[RESOURCES.index("cpu")]) + 1e-9
    assert int(parts["memory"]) * 4 <= float(total[RESOURCES.index("memory")])
    assert int(parts["user_slots"]) >= 1
