"""A newcomer's first commands (issue 15): ``pooltree --version``, help without values flags do not take, and
``pooltree local --nodes N`` sharing the machine among its nodes instead of each claiming all of it."""

from __future__ import annotations

import re
from importlib.metadata import version

from typer.testing import CliRunner

from pooltree.cli import app
from pooltree.local.sizing import check_node_limits, size_nodes
from pooltree.node.agent import detect_resource_limits
from pooltree.resources import RESOURCES, vector

GIB = 1 << 30


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
    assert size_nodes(1).resources is None  # one node: the whole machine, as detected
    text = size_nodes(4).resources
    assert text is not None
    parts = dict(item.split("=") for item in text.split(","))
    cpus = float(total[RESOURCES.index("cpu")])
    assert float(parts["cpu"]) == max(cpus / 4, 1.0)  # never below a default job's cpu
    assert int(parts["memory"]) * 4 <= float(total[RESOURCES.index("memory")])
    assert int(parts["user_slots"]) >= 1


def test_more_nodes_than_cpus_still_run_the_default_job_and_say_so() -> None:
    """Issue 26: on 2 cpus ``--nodes 4`` made 0.5-cpu nodes, below the tree's minimum free cpu per node (1), on
    which nothing could ever start."""
    sizing = size_nodes(4, vector(user_slots=2, cpu=2, memory=8 * GIB, network=100))
    parts = dict(item.split("=") for item in (sizing.resources or "").split(","))
    assert float(parts["cpu"]) == 1.0 and int(parts["user_slots"]) == 1 and int(parts["memory"]) == 2 * GIB
    (note,) = sizing.notes
    assert "4 nodes share 2 cpus" in note and "2 more than this machine has" in note
    assert size_nodes(2, vector(user_slots=4, cpu=4, memory=8 * GIB, network=100)).notes == []


def test_node_limits_that_cannot_run_a_job_are_named() -> None:
    (below,) = check_node_limits(vector(user_slots=2, cpu=0.5, memory=8 * GIB, network=100))
    assert "min_spare_allocation_resources_on_node: cpu 1" in below and "no job can start" in below
    (small,) = check_node_limits(vector(user_slots=2, cpu=2, memory=300 << 20, network=100))
    assert "memory_limit" in small and "512" in small
    assert check_node_limits(vector(user_slots=2, cpu=1, memory=GIB, network=100)) == []
