"""The simulator runs an operation with ``schedule_in_single_tree`` in the one tree the core chooses
(``pooltree/strategy/single_tree.py``, the live service's rule too); several ``pool_trees`` without it run in
each (``test_sim_trees.py``)."""

from __future__ import annotations

from typing import Any

from simkit import events, job, run, two_tree_document


def _document(spec: dict[str, Any], research_b: dict[str, Any]) -> dict[str, Any]:
    operation = {
        "id": "op",
        "submit_time": 5,
        "spec": {"pool": "research", "pool_trees": ["a", "b"], **spec},
        "tasks": [{"job_count": 2, "resources": job(cpu=1, memory="1Gi"), "duration": "30s"}],
    }
    return two_tree_document([operation], research_b)


def test_the_tree_with_the_guarantee_runs_the_operation(tmp_path) -> None:
    document = _document({"schedule_in_single_tree": True}, {"strong_guarantee_resources": {"cpu": 2}})
    run(document, tmp_path)
    submitted = [e for e in events(tmp_path) if e["event"] == "operation_submitted"]
    assert [e["tree"] for e in submitted] == ["b"]
    started = [
        e for e in events(tmp_path) if e["event"] == "allocation_started" and e.get("operation_id") == "op"
    ]
    assert started and all(e["node"] == "nb" for e in started)


def test_consider_guarantees_without_any_fails_the_operation(tmp_path) -> None:
    spec = {"schedule_in_single_tree": True, "consider_guarantees_for_single_tree": True}
    summary = run(_document(spec, {}), tmp_path)
    assert summary["operations"][0]["state"] == "failed"
    failed = [e for e in events(tmp_path) if e["event"] == "operation_failed"]
    assert failed[0]["error"] == "Found no best single non-empty tree for operation"
