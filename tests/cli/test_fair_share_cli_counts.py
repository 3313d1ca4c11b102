"""`pooltree fair-share` shows operation counts, pending queues, pending alerts and starvation (real subprocess)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from clikit import run_fair_share

QUEUES_SNAPSHOT: dict[str, Any] = {
    "cluster": {"total_resources": {"user_slots": 100, "cpu": 100, "memory": "100Gi"}},
    "pool_trees": {
        "physical": {
            "pools": {
                "project": {
                    "max_running_operation_count": 3,
                    "pools": {
                        "adhoc": {"max_running_operation_count": 2},
                        "batch": {},
                    },
                },
                "light": {"mode": "fifo", "enable_lightweight_operations": True},
            }
        }
    },
    "operations": [
        # adhoc runs 2 (its limit); a2 waits in adhoc's queue.
        *(
            {"id": f"a{i}", "type": "map", "user": "alice", "start_time": i, "spec": {"pool": "adhoc"}}
            for i in range(3)
        ),
        # project runs 3 (its limit) after b0; b1 and b2 wait in project's queue.
        *(
            {"id": f"b{i}", "type": "map", "user": "bob", "start_time": 10 + i, "spec": {"pool": "batch"}}
            for i in range(3)
        ),
        # Lightweight: vanilla in a FIFO pool with the flag; never pending, not a running operation.
        {"id": "v0", "type": "vanilla", "user": "carol", "start_time": 20, "spec": {"pool": "light"}},
        {"id": "m0", "type": "map", "user": "carol", "start_time": 21, "spec": {"pool": "light"}},
    ],
}


def write(tmp_path: Path, snapshot: dict[str, Any], name: str = "snapshot.json") -> Path:
    for op in snapshot.get("operations", []):
        op.setdefault("resource_demand", {"cpu": 5, "user_slots": 1})
    path = tmp_path / name
    path.write_text(json.dumps(snapshot))
    return path


def test_counts_queues_and_pending_placement_in_json_and_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, json.loads(json.dumps(QUEUES_SNAPSHOT)))
    done = run_fair_share(str(path))
    assert done.returncode == 0, done.stderr
    tree = json.loads(done.stdout)["pool_trees"]["physical"]
    pools, operations = tree["pools"], tree["operations"]

    def counts(pool: str) -> tuple[int, int, int, list[str]]:
        info = pools[pool]
        return (
            info["running_operation_count"],
            info["lightweight_running_operation_count"],
            info["operation_count"],
            info["pending_operation_ids"],
        )

    assert counts("adhoc") == (2, 0, 3, ["a2"])
    assert counts("batch") == (1, 0, 3, [])
    assert counts("project") == (3, 0, 6, ["b1", "b2"])
    assert counts("light") == (1, 1, 2, [])
    assert counts("<Root>") == (4, 1, 8, [])
    assert (
        pools["project"]["max_running_operation_count"],
        pools["batch"]["max_running_operation_count"],
    ) == (
        3,
        8,
    )
    assert pools["batch"]["max_operation_count"] == 50

    # A pending operation names the pool whose limit holds it and its (0-based) place in that queue.
    assert (operations["a2"]["pending_pool"], operations["a2"]["pending_position"]) == ("adhoc", 0)
    assert (operations["b2"]["pending_pool"], operations["b2"]["pending_position"]) == ("project", 1)
    assert operations["b2"]["pool"] == "batch"
    assert operations["b2"]["alerts"]["operation_pending"] == {
        "message": "Max running operation count violated",
        "attributes": {"pool": "project", "limit": 3, "pool_tree": "physical"},
    }
    for op_id in ("a0", "b0", "v0", "m0"):
        assert "pending_pool" not in operations[op_id]
        assert operations[op_id]["alerts"] == {}
    assert operations["v0"]["lightweight"] is True and operations["m0"]["lightweight"] is False

    as_yaml = run_fair_share(str(path), "--format", "yaml")
    assert as_yaml.returncode == 0, as_yaml.stderr
    assert yaml.safe_load(as_yaml.stdout)["pool_trees"]["physical"] == tree


def test_table_shows_counts_queues_and_pending_alerts(tmp_path: Path) -> None:
    path = write(tmp_path, json.loads(json.dumps(QUEUES_SNAPSHOT)))
    done = run_fair_share(str(path), "--format", "table")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()

    def line_of(name: str) -> str:
        return next(line for line in lines if f" {name} fair" in line)

    assert "ops running 3/3 total 6/50 queue [b1, b2]" in line_of("project")
    assert "ops running 2/2 total 3/50 queue [a2]" in line_of("adhoc")
    assert "ops running 1/8 total 2/50 lightweight 1" in line_of("light")
    assert "pending in project #2" in line_of("b2")
    assert "pending in adhoc #1" in line_of("a2")
    assert "lightweight" in line_of("v0")
    assert (
        "operation_pending b2: Max running operation count violated (pool=project, limit=3, pool_tree=physical)"
        in done.stdout
    )


def starvation_snapshot(tolerance_b: float | None) -> dict[str, Any]:
    b: dict[str, Any] = {} if tolerance_b is None else {"fair_share_starvation_tolerance": tolerance_b}
    return {
        "cluster": {"total_resources": {"user_slots": 100, "cpu": 100, "memory": "100Gi"}},
        "pool_trees": {
            "physical": {
                "config": {"fair_share_starvation_timeout": "30s"},
                "pools": {"a": {}, "b": {**b, "fair_share_starvation_timeout": "10s"}},
            }
        },
        "operations": [
            {
                "id": f"op-{pool}",
                "type": "map",
                "user": "u",
                "start_time": 0,
                "spec": {"pool": pool},
                "resource_usage": {"cpu": usage},
                "resource_demand": {"cpu": 100},
            }
            for pool, usage in (("a", 45), ("b", 45))
        ],
        "fair_share_update": {"now": 200, "previous_update_time": 190},
    }


def test_starvation_status_comes_from_the_strategy(tmp_path: Path) -> None:
    # Both pools get fair share 0.5 and use 0.45: the default tolerance 0.8 (bound 0.4) says normal, b's own
    # tolerance 1.0 (bound 0.5) says below fair share. One snapshot is the strategy's first update: b becomes
    # below fair share since `now` and is not starving yet (that needs more than b's 10 s timeout below it).
    done = run_fair_share(str(write(tmp_path, starvation_snapshot(1.0))))
    assert done.returncode == 0, done.stderr
    tree = json.loads(done.stdout)["pool_trees"]["physical"]
    pools, operations = tree["pools"], tree["operations"]
    assert abs(pools["b"]["fair_share_ratio"] - 0.5) < 1e-6
    assert pools["a"]["scheduling_status"] == "normal"
    assert pools["a"]["below_fair_share_since"] is None
    assert pools["b"]["scheduling_status"] == "below_fair_share"
    assert pools["b"]["below_fair_share_since"] == 200
    assert pools["b"]["effective_fair_share_starvation_tolerance"] == 1.0
    assert pools["b"]["effective_fair_share_starvation_timeout"] == 10.0
    assert pools["a"]["effective_fair_share_starvation_timeout"] == 30.0
    assert operations["op-b"]["scheduling_status"] == "below_fair_share"
    assert operations["op-a"]["scheduling_status"] == "normal"
    for element in [*pools.values(), *operations.values()]:
        assert element["starvation_status"] == "non_starving"
        assert element["lowest_starving_ancestor"] is None
    assert pools["<Root>"]["scheduling_status"] == "normal"

    # Without b's own tolerance both pools use the tree's 0.8 and nothing is below fair share.
    default = run_fair_share(str(write(tmp_path, starvation_snapshot(None), "default.json")))
    assert default.returncode == 0, default.stderr
    pools = json.loads(default.stdout)["pool_trees"]["physical"]["pools"]
    assert {p["scheduling_status"] for p in pools.values()} == {"normal"}


def test_queues_example_shows_who_holds_each_pending_operation() -> None:
    done = run_fair_share("examples/project-root-queues.yaml")
    assert done.returncode == 0, done.stderr
    tree = json.loads(done.stdout)["pool_trees"]["physical"]
    pools, operations = tree["pools"], tree["operations"]
    assert pools["project-root"]["pending_operation_ids"] == ["batch-3"]
    assert pools["project-backup"]["pending_operation_ids"] == ["backup-3", "backup-4"]
    assert pools["project-batch"]["pending_operation_ids"] == []
    assert (pools["project-root"]["running_operation_count"], pools["project-root"]["operation_count"]) == (
        10,
        13,
    )
    assert pools["tools"]["lightweight_running_operation_count"] == 1
    assert pools["tools"]["running_operation_count"] == 0
    holders = {op_id: op.get("pending_pool") for op_id, op in operations.items() if "pending_pool" in op}
    assert holders == {"batch-3": "project-root", "backup-3": "project-backup", "backup-4": "project-backup"}
    assert operations["backup-4"]["pending_position"] == 1


def test_pending_operations_are_listed_and_their_usage_is_reported_not_counted(tmp_path: Path) -> None:
    """Pending operations are not elements of the update (as in YTsaurus): the view lists them with their queue
    position and zero shares, and usage a snapshot gives a pending operation is named on stderr, not counted."""
    snapshot = {
        "cluster": {"total_resources": {"user_slots": 10, "cpu": 10, "memory": "10Gi"}},
        "pool_trees": {"physical": {"pools": {"team": {"max_running_operation_count": 1}}}},
        "operations": [
            {
                "id": f"op{i}",
                "type": "map",
                "user": "alice",
                "start_time": i,
                "spec": {"pool": "team"},
                "resource_usage": {"cpu": 2, "user_slots": 2},
                "resource_demand": {"cpu": 4, "user_slots": 4},
            }
            for i in range(2)
        ],
    }
    path = tmp_path / "pending.json"
    path.write_text(json.dumps(snapshot))
    done = run_fair_share(str(path))
    assert done.returncode == 0, done.stderr
    tree = json.loads(done.stdout)["pool_trees"]["physical"]
    pending = tree["operations"]["op1"]
    assert pending["pending_pool"] == "team" and pending["pending_position"] == 0
    assert pending["usage_ratio"] == 0.0 and pending["fair_share_ratio"] == 0.0
    assert tree["pools"]["team"]["usage_ratio"] == 0.2  # op0's usage only
    assert "op1 in tree physical" in done.stderr and "not counted" in done.stderr
