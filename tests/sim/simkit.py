"""Small scenarios for simulator tests, built as documents (the same path a scenario file takes)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pooltree.sim import parse_scenario, run_to_directory

PROJECT_POOLS = {
    "project-root": {
        "strong_guarantee_resources": {"cpu": 100},
        "max_running_operation_count": 10,
        "max_operation_count": 50,
        "pools": {
            "project-adhoc": {"strong_guarantee_resources": {"cpu": 80}},
            "project-batch": {"weight": 10, "max_running_operation_count": 4},
            "project-backup": {"strong_guarantee_resources": {"cpu": 20}, "max_running_operation_count": 2},
        },
    }
}


def job(cpu: float = 1, memory: str = "2Gi") -> dict[str, Any]:
    return {"cpu": cpu, "memory": memory, "user_slots": 1}


def two_tree_document(
    operations: list[dict[str, Any]],
    research_b: dict[str, Any] | None = None,
    *,
    seed: int = 1,
    until: str = "2m",
) -> dict[str, Any]:
    """Pool trees ``a`` (node ``na``, tag ``ta``) and ``b`` (node ``nb``, tag ``tb``) of one 4-cpu node each, both
    with a pool ``research`` (``research_b``: its config in ``b``), and ``operations``."""
    node = {"count": 1, "resource_limits": {"user_slots": 4, "cpu": 4, "memory": "8Gi"}}
    return {
        "seed": seed,
        "until": until,
        "default_pool_tree": "a",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "cluster": {
            "nodes": [{**node, "address": "na", "tags": ["ta"]}, {**node, "address": "nb", "tags": ["tb"]}]
        },
        "pool_trees": {
            "a": {"config": {"node_tag_filter": "ta"}, "pools": {"research": {}}},
            "b": {"config": {"node_tag_filter": "tb"}, "pools": {"research": research_b or {}}},
        },
        "operations": operations,
    }


def project_document(**overrides: Any) -> dict[str, Any]:
    """The seeds' project example on 10 nodes × 10 cpu (100 cpu = project-root's guarantee)."""
    document: dict[str, Any] = {
        "seed": 3,
        "until": "25m",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "cluster": {
            "nodes": [
                {
                    "address": "n",
                    "count": 10,
                    "resource_limits": {"user_slots": 10, "cpu": 10, "memory": "40Gi"},
                }
            ]
        },
        "pool_trees": {
            "physical": {
                "config": {"fair_share_starvation_timeout": "30s"},
                "pools": copy.deepcopy(PROJECT_POOLS),
            }
        },
        "operations": [
            {
                "id": "batch-1",
                "submit_time": 0,
                "spec": {"pool": "project-batch"},
                "tasks": [
                    {
                        "job_count": 2000,
                        "resources": job(),
                        "duration": {"distribution": "lognormal", "median": "20m", "sigma": 0.3},
                    }
                ],
            },
            {
                "id": "adhoc-1",
                "submit_time": "300s",
                "spec": {"pool": "project-adhoc"},
                "tasks": [{"job_count": 150, "resources": job(), "duration": "5m"}],
            },
            {
                "id": "backup-1",
                "submit_time": "480s",
                "spec": {"pool": "project-backup"},
                "tasks": [{"job_count": 40, "resources": job(), "duration": "5m"}],
            },
        ],
    }
    document.update(overrides)
    return document


def run(document: dict[str, Any], out: Path, **options: Any) -> dict[str, Any]:
    """Run a scenario document into ``out``; returns summary.json as written."""
    scenario = parse_scenario(copy.deepcopy(document), source="test")
    run_to_directory(scenario, out, plots=options.pop("plots", False), **options)
    return json.loads((out / "summary.json").read_text())


def events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def timeline(out: Path) -> list[dict[str, str]]:
    import csv

    with (out / "timeline.csv").open() as f:
        return list(csv.DictReader(f))
