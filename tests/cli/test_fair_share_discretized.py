"""`pooltree fair-share` with ``enable_discretized_fair_share`` (real subprocess): an operation given by job groups
has a per-job vector (one job's resources), so its share is whole jobs; one given by usage and demand only keeps its
continuous share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clikit import run_fair_share


def _snapshot(config: dict[str, Any]) -> dict[str, Any]:
    job = {"resources": {"cpu": 1, "user_slots": 1}, "running": 0, "pending": 3}
    return {
        "cluster": {"total_resources": {"user_slots": 20, "cpu": 3, "memory": "10Gi"}},
        "pool_trees": {"physical": {"config": config, "pools": {"pool": {}}}},
        "operations": [
            {
                "id": name,
                "type": "vanilla",
                "user": "alice",
                "start_time": 0,
                "spec": {"pool": "pool"},
                "jobs": [job],
            }
            for name in ("op1", "op2")
        ],
    }


def _shares(tmp_path: Path, snapshot: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot))
    done = run_fair_share(str(path))
    assert done.returncode == 0, done.stderr
    assert "discretized" not in done.stderr  # accepted and implemented: no unsupported-options alert
    return json.loads(done.stdout)["pool_trees"]["physical"]["operations"]


def test_job_groups_give_whole_jobs(tmp_path: Path) -> None:
    operations = _shares(tmp_path, _snapshot({"enable_discretized_fair_share": True}))
    for name in ("op1", "op2"):
        assert operations[name]["detailed_fair_share"]["total"]["cpu"] == pytest.approx(1 / 3)
        assert operations[name]["discretized_fair_share_active"] is True
    operations = _shares(tmp_path, _snapshot({}))
    assert operations["op1"]["detailed_fair_share"]["total"]["cpu"] == pytest.approx(0.5)


def test_usage_and_demand_only_stay_continuous(tmp_path: Path) -> None:
    snapshot = _snapshot({"enable_discretized_fair_share": True, "max_discretized_steps": 2})
    for op in snapshot["operations"]:
        del op["jobs"]
        op["resource_demand"] = {"cpu": 3, "user_slots": 3}
    operations = _shares(tmp_path, snapshot)
    assert operations["op1"]["detailed_fair_share"]["total"]["cpu"] == pytest.approx(0.5)
    assert operations["op1"]["discretized_fair_share_active"] is False


def test_bad_step_count_names_the_option(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(
        json.dumps(_snapshot({"enable_discretized_fair_share": True, "max_discretized_steps": 0}))
    )
    done = run_fair_share(str(path))
    assert done.returncode != 0
    assert "max_discretized_steps" in done.stderr
