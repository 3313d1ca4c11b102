"""`pooltree fair-share` end to end on the seeds' example and on bad input (real processes where the entry point
and piped output matter: ``clikit``)."""

from __future__ import annotations

import json
from pathlib import Path

from clikit import run_fair_share, run_fair_share_process


def test_example_json_has_orchid_fields_and_consistent_shares() -> None:
    done = run_fair_share("examples/project-root.yaml", "--timings")
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    tree = view["pool_trees"]["physical"]
    pools, operations = tree["pools"], tree["operations"]
    assert {"<Root>", "project-root", "project-adhoc", "project-batch", "project-backup"} <= set(pools)
    for element in [*pools.values(), *operations.values()]:
        for key in (
            "fair_share_ratio",
            "usage_ratio",
            "demand_ratio",
            "detailed_fair_share",
            "scheduling_status",
            "starvation_status",
            "dominant_resource",
            "satisfaction_ratio",
            "parent",
        ):
            assert key in element
        assert element["fair_share_ratio"] <= element["demand_ratio"] + 1e-9
    children = [p for p in pools.values() if p["parent"] == "project-root"]
    assert sum(p["fair_share_ratio"] for p in children) <= pools["project-root"]["fair_share_ratio"] + 1e-9
    assert pools["project-root"]["max_running_operation_count"] == 10
    assert view["timings"]["update_s"] > 0


def test_table_and_bad_input(tmp_path: Path) -> None:
    """As a real ``python -m pooltree.cli`` process: exit codes and one clear line, no traceback."""
    assert run_fair_share_process("examples/project-root.yaml", "--format", "table").returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {total_resources: {cpu: 10}}\npool_trees: {t: {pools: {a: {weight: -1}}}}\n")
    done = run_fair_share_process(str(bad))
    assert done.returncode != 0
    assert "weight" in done.stderr and done.stdout == ""


def test_piped_table_has_one_line_per_element() -> None:
    """Redirected output is not wrapped at 80 columns: every pool and operation is one whole line."""
    view = json.loads(run_fair_share("examples/project-root.yaml").stdout)["pool_trees"]["physical"]
    done = run_fair_share_process("examples/project-root.yaml", "--format", "table", wide_console=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    shown = [name for name in [*view["pools"], *view["operations"]] if name != "<Root>"]
    assert len(lines) == 1 + len(shown)  # the tree's header, then one line each
    for name in shown:
        (line,) = [text for text in lines if f" {name} fair " in text]
        element = view["pools"].get(name) or view["operations"][name]
        assert f"fair {element['fair_share_ratio']:6.3f}" in line
        assert f"demand {element['demand_ratio']:6.3f}" in line
        assert element["scheduling_status"] in line
