"""Commit before act (issue 13): abort, complete, suspend, resume and update_operation_parameters commit the
operation's new record to the store before they change the scheduler's memory; a failed commit answers an error
and leaves memory as it was (so nothing the store does not hold can act: no job aborted on its node, no pool
changed, no operation taken out of its trees).

The store is a real SQLite store whose operation commits fail on demand (as a lost connection or a deleted file
would make them fail) and that records what the scheduler's memory showed when the commit was attempted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import JobRecord, Mutation, OperationRecord, StoreUnavailable
from pooltree.server.store.sqlite import SqliteStore

GIB = 1 << 30
TREES = {"default": {"config": {}, "pools": {"a": {}, "b": {"weight": 2.0}}}}


class FailingCommits(SqliteStore):
    """SQLite whose operation commits fail while ``fail`` is set; ``seen`` is what ``snapshot()`` returned at the
    moment of the failed commit (the scheduler's memory the store was asked to make durable)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.fail = False
        self.snapshot: Callable[[], Any] = lambda: None
        self.seen: list[Any] = []

    def put_operation(
        self, record: OperationRecord, *, mutation: Mutation | None = None, jobs: Sequence[JobRecord] = ()
    ) -> None:
        if self.fail:
            self.seen.append(self.snapshot())
            raise StoreUnavailable(
                "Scheduler store is unavailable, nothing is acknowledged: injected failure"
            )
        super().put_operation(record, mutation=mutation, jobs=jobs)


def _memory(live: LiveScheduler, operation_id: str) -> dict[str, Any]:
    """Everything of one operation a command may change in the scheduler's memory."""
    op = live.operations.get(operation_id)
    registered = live.registry.operations.get(operation_id)
    tree = live.registry.trees["default"]
    tree_op = tree.operations.get(operation_id)
    return {
        "live": op is not None,
        "state": None if op is None else op.state,
        "suspended": None if op is None else op.suspended,
        "events": None if op is None else len(op.events),
        "runtime_parameters": None if op is None else repr(op.runtime_parameters),
        "pools": None if op is None else dict(op.pools),
        "registered_state": None if registered is None else registered.state.value,
        "registered_suspended": None if registered is None else registered.suspended,
        "pool": None if tree_op is None else tree_op.pool.name,
        "weight": None if tree_op is None else tree_op.weight,
        "attached": [name for name, core in live.cores.items() if operation_id in core.controllers],
        "aborts": {address: list(node.aborts) for address, node in live.nodes.items()},
        "live_jobs": sorted(live.jobs),
        "counts": live.counts.counters(_no_filter()),
    }


def _no_filter() -> Any:
    from pooltree.server.live.counts import CountFilter

    return CountFilter()


@pytest.fixture
def cluster(tmp_path: Path) -> tuple[LiveScheduler, FailingCommits, str]:
    """A scheduler with one node running one job of an operation in pool ``a``."""
    store = FailingCommits(tmp_path / "s.db")
    live = LiveScheduler(store)
    live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    spec = {"pool": "a", "tasks": {"main": {"command": "sleep 100", "job_count": 1}}}
    op = live.start_operation("vanilla", spec, "alice", 0.0)
    limits = {"user_slots": 4, "cpu": 4, "memory": 8 * GIB}
    response = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": limits}), 0.1)
    assert [spec["operation_id"] for spec in response["start"]] == [op.id]
    job = response["start"][0]
    running = {"job_id": job["job_id"], "operation_id": op.id, "resource_usage": job["resources"]}
    live.process_heartbeat(
        parse_heartbeat({"node_address": "n1", "resource_limits": limits, "running_jobs": [running]}), 0.2
    )
    assert op.state == "running" and len(op.jobs) == 1
    yield live, store, op.id
    store.close()


COMMANDS: dict[str, Callable[[LiveScheduler, str], None]] = {
    "abort": lambda live, op_id: live.finish_operation(op_id, "aborted", 1.0, error={"code": 1}),
    "complete": lambda live, op_id: live.finish_operation(op_id, "completed", 1.0),
    "suspend": lambda live, op_id: live.suspend_operation(op_id, 1.0, abort_running_jobs=True),
    "update_pool": lambda live, op_id: live.update_operation_parameters(op_id, {"pool": "b"}, 1.0),
    "update_weight": lambda live, op_id: live.update_operation_parameters(op_id, {"weight": 3.0}, 1.0),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_failed_commit_changes_nothing_and_comes_before_any_change(
    cluster: tuple[LiveScheduler, FailingCommits, str], command: str
) -> None:
    live, store, op_id = cluster
    before = _memory(live, op_id)
    store.snapshot = lambda: _memory(live, op_id)
    store.fail = True
    with pytest.raises(StoreUnavailable):
        COMMANDS[command](live, op_id)
    assert store.seen == [before], "the runtime changed before the store committed"
    assert _memory(live, op_id) == before, "a refused command left a change in memory"
    store.fail = False
    stored = store.get_operation(op_id)
    assert stored is not None and stored.state == "running" and not stored.document.get("suspended")


def test_resume_commits_first(cluster: tuple[LiveScheduler, FailingCommits, str]) -> None:
    live, store, op_id = cluster
    live.suspend_operation(op_id, 1.0)
    before = _memory(live, op_id)
    assert before["suspended"] and before["registered_suspended"]
    store.snapshot = lambda: _memory(live, op_id)
    store.fail = True
    with pytest.raises(StoreUnavailable):
        live.resume_operation(op_id, 2.0)
    assert store.seen == [before] and _memory(live, op_id) == before
    store.fail = False
    live.resume_operation(op_id, 2.0)
    assert not live.operations[op_id].suspended and not live.registry.operations[op_id].suspended
    assert store.get_operation(op_id).document["suspended"] is False  # type: ignore[union-attr]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_committed_command_is_stored_and_acted_on(
    cluster: tuple[LiveScheduler, FailingCommits, str], command: str
) -> None:
    """The same commands with a healthy store: the store holds what memory shows (the tests above can fail)."""
    live, store, op_id = cluster
    job_id = next(iter(live.operations[op_id].jobs))
    COMMANDS[command](live, op_id)
    stored = store.get_operation(op_id)
    assert stored is not None
    aborts = [entry["job_id"] for entry in live.nodes["n1"].aborts]
    if command in ("abort", "complete"):
        final = {"abort": "aborted", "complete": "completed"}[command]
        assert (
            stored.state == final and op_id not in live.operations and op_id not in live.registry.operations
        )
        states = [event["state"] for event in stored.document["state_events"]]
        assert states[-2:] == [final.replace("ed", "ing"), final]
        assert stored.finish_time == 1.0 and aborts == [job_id]
        assert "operation_pending" not in stored.document["alerts"]
        assert live.counts.counters(_no_filter())["state_counts"] == {final: 1}
    elif command == "suspend":
        assert stored.document["suspended"] is True and live.operations[op_id].suspended
        assert live.registry.operations[op_id].suspended and aborts == [job_id]
    elif command == "update_pool":
        assert stored.pool == "b" and live.operations[op_id].pools == {"default": "b"}
        assert live.registry.trees["default"].operations[op_id].pool.name == "b"
        options = stored.runtime_parameters["scheduling_options_per_pool_tree"]["default"]
        assert options["pool"] == "b"
    else:
        options = stored.runtime_parameters["scheduling_options_per_pool_tree"]["default"]
        assert options["weight"] == 3.0 and live.registry.trees["default"].operations[op_id].weight == 3.0
