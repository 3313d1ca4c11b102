"""Waking idle nodes when demand appears: exact (same outputs as a naive run) and proportional to the demand.

Operations arrive between fair-share updates (so the strategy publishes them only at the next update) on a
40-node cluster that is mostly idle: a node that beats before the update cannot start anything, and once the
first nodes placed the new jobs the rest would find nothing either.
"""

from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any

import pytest

from tests.sim.simkit import run


def spread_document(
    *, busy: bool, jitter: str = "100ms", nodes: int = 40, spacing: float = 45.0, until: str = "12m"
) -> dict[str, Any]:
    """12 operations in three pools arriving at x.5 s; ``busy``: enough jobs for contention and preemption."""
    operations = []
    for i in range(12):
        operations.append(
            {
                "id": f"op-{i:02d}",
                "submit_time": f"{20.5 + spacing * i}s",
                "spec": {"pool": ("alpha", "beta", "gamma")[i % 3]},
                "tasks": [
                    {
                        "job_count": 20 + 4 * i if busy else 6 + i,
                        "resources": {"cpu": 2, "memory": "2Gi", "user_slots": 1},
                        "duration": {"distribution": "uniform", "min": "30s", "max": "3m"},
                    }
                ],
            }
        )
    return {
        "seed": 5,
        "until": until,
        "scheduler": {"node_heartbeat_jitter": jitter},
        "cluster": {
            "nodes": [
                {
                    "address": "n",
                    "count": nodes,
                    "resource_limits": {"user_slots": 4, "cpu": 4, "memory": "8Gi"},
                }
            ]
        },
        "pool_trees": {
            "physical": {
                "config": {"fair_share_starvation_timeout": "20s"},
                "pools": {
                    "alpha": {"strong_guarantee_resources": {"cpu": 40}},
                    "beta": {"weight": 2},
                    "gamma": {"mode": "fifo"},
                },
            }
        },
        "node_failures": [{"address": "n-07", "at": "200s", "duration": "2m"}],
        "operations": operations,
    }


def _comparable(summary: dict) -> dict:
    summary = dict(summary)
    summary.pop("engine")
    summary["global"] = {k: v for k, v in summary["global"].items() if k != "wall_time"}
    return summary


@pytest.mark.parametrize(
    ("busy", "jitter"),
    [(False, "100ms"), (True, "100ms"), (True, "0s"), (True, "900ms")],
    ids=["idle", "busy", "no-jitter", "jitter-900ms"],
)
def test_waking_idle_nodes_one_by_one_is_exact(busy: bool, jitter: str, tmp_path: Path) -> None:
    document = spread_document(busy=busy, jitter=jitter, nodes=24, spacing=25.0, until="6m")
    skipping = run(document, tmp_path / "skip")
    naive = run(
        document, tmp_path / "naive", skip_idle_heartbeats=False, skip_unchanged_fair_share_updates=False
    )
    for name in ("events.jsonl", "timeline.csv", "operations.csv"):
        assert filecmp.cmp(tmp_path / "skip" / name, tmp_path / "naive" / name, shallow=False), name
    assert _comparable(skipping) == _comparable(naive)
    if busy:
        assert skipping["global"]["preempted_allocation_count"] > 0
    else:
        assert skipping["global"]["completed_operation_count"] >= 6


def test_new_demand_wakes_idle_nodes_in_proportion(tmp_path: Path) -> None:
    """Before: every arrival woke all ~35 idle nodes at once, and again nobody could start the operation until
    the update published it (297 heartbeats processed, 577 skipped); now nodes wake after the publishing update,
    one at a time in beat order while demand is left (100 processed, 273 skipped)."""
    summary = run(spread_document(busy=False), tmp_path)
    engine = summary["engine"]
    assert summary["global"]["completed_operation_count"] == 12
    assert engine["heartbeats_processed"] < 150
    assert engine["heartbeats_processed"] + engine["heartbeats_skipped"] < 500
