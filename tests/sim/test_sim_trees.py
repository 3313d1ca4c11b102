"""An operation of several pool trees (``pool_trees`` without ``schedule_in_single_tree``) runs in each of them, as
in the live service: one controller registered in every tree, each tree's core scheduling it on that tree's nodes
while that tree runs it (its allocations count against that tree); ``pending`` while any tree holds it in a
queue, ``running`` once every tree runs it; a tree that refuses it refuses the whole start, nothing registered."""

from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any

from simkit import events, job, run, two_tree_document


def _document(
    operations: list[dict[str, Any]], research_b: dict[str, Any] | None = None, until: str = "5m"
) -> dict[str, Any]:
    return two_tree_document(operations, research_b, seed=3, until=until)


def _op(op_id: str, trees: list[str], jobs: int, duration: str, submit: float = 5) -> dict[str, Any]:
    return {
        "id": op_id,
        "submit_time": submit,
        "spec": {"pool": "research", "pool_trees": trees},
        "tasks": [{"job_count": jobs, "resources": job(cpu=1, memory="1Gi"), "duration": duration}],
    }


def _starts(out: Path, op_id: str) -> list[dict[str, Any]]:
    return [e for e in events(out) if e["event"] == "allocation_started" and e["operation_id"] == op_id]


def _operation(summary: dict[str, Any], op_id: str) -> dict[str, Any]:
    return next(o for o in summary["operations"] if o["id"] == op_id)


def test_an_operation_of_two_trees_runs_on_the_nodes_of_both(tmp_path: Path) -> None:
    """8 one-cpu jobs of 30 s on two 4-cpu nodes, one per tree: in both trees at once they take one round; in
    tree ``a`` alone two."""
    both = run(_document([_op("op", ["a", "b"], 8, "30s")]), tmp_path / "both")
    one = run(_document([_op("op", ["a"], 8, "30s")]), tmp_path / "one")
    starts = _starts(tmp_path / "both", "op")
    assert sorted(e["node"] for e in starts) == ["na"] * 4 + ["nb"] * 4
    assert {e["node"]: e["tree"] for e in starts} == {"na": "a", "nb": "b"}
    submitted = next(e for e in events(tmp_path / "both") if e["event"] == "operation_submitted")
    assert submitted["pool_trees"] == ["a", "b"]
    assert _operation(both, "op")["state"] == "completed"
    assert _operation(both, "op")["finish_time"] < 45
    assert {e["node"] for e in _starts(tmp_path / "one", "op")} == {"na"}
    assert _operation(one, "op")["finish_time"] > 60
    # each tree counts what the operation holds there: its usage of tree b's cluster is b's node's share
    assert both["pools"]["b/research"]["mean_usage_ratio"] > 0.5
    assert one["pools"]["b/research"]["mean_usage_ratio"] == 0


def test_held_in_one_tree_it_is_pending_and_runs_where_it_may(tmp_path: Path) -> None:
    """Tree ``b``'s pool runs one operation at a time: ``multi`` waits in ``b``'s queue behind ``blocker`` (so it
    is pending) while tree ``a``'s core schedules it on ``na``; once ``blocker`` ends it runs in both."""
    document = _document(
        [_op("blocker", ["b"], 1, "60s", submit=0), _op("multi", ["a", "b"], 12, "30s")],
        research_b={"max_running_operation_count": 1},
    )
    summary = run(document, tmp_path)
    starts = _starts(tmp_path, "multi")
    blocker_end = next(
        e["time"]
        for e in events(tmp_path)
        if e["event"] == "allocation_finished" and e["operation_id"] == "blocker"
    )
    early = [e for e in starts if e["time"] < blocker_end]
    assert early and {e["node"] for e in early} == {"na"}
    assert any(e["node"] == "nb" for e in starts if e["time"] >= blocker_end)
    multi = _operation(summary, "multi")
    assert multi["state"] == "completed"
    assert multi["start_time"] >= blocker_end  # running once every tree runs it


def test_a_tree_that_refuses_it_refuses_the_start(tmp_path: Path) -> None:
    """Tree ``b``'s pool admits one operation: ``multi`` fails at arrival and never runs in tree ``a`` either."""
    document = _document(
        [_op("blocker", ["b"], 1, "60s", submit=0), _op("multi", ["a", "b"], 4, "30s")],
        research_b={"max_operation_count": 1},
    )
    summary = run(document, tmp_path)
    assert _operation(summary, "multi")["state"] == "failed"
    assert not _starts(tmp_path, "multi")
    assert _operation(summary, "blocker")["state"] == "completed"


def test_skipping_is_exact_with_operations_of_several_trees(tmp_path: Path) -> None:
    document = _document(
        [
            _op("blocker", ["b"], 2, "40s", submit=0),
            _op("multi", ["a", "b"], 20, "25s"),
            _op("late", ["b", "a"], 6, "20s", submit=70),
        ],
        research_b={"max_running_operation_count": 1},
        until="6m",
    )
    skipping = run(document, tmp_path / "skip")
    naive = run(
        document, tmp_path / "naive", skip_idle_heartbeats=False, skip_unchanged_fair_share_updates=False
    )
    assert skipping["engine"]["heartbeats_skipped"] > 0
    assert naive["engine"]["heartbeats_skipped"] == 0
    for name in ("events.jsonl", "timeline.csv", "operations.csv"):
        assert filecmp.cmp(tmp_path / "skip" / name, tmp_path / "naive" / name, shallow=False), name
    assert all(o["state"] == "completed" for o in skipping["operations"])
