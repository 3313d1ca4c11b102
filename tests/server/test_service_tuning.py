"""Per-request work under load (issue 13): a queued operation's get_operation is answered on the event loop even
though every start into its pool changes what it shows, queue positions follow starts without a pass over the
queue, and the GIL switch interval the scheduler process sets."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pooltree.config import parse_pool_trees
from pooltree.server.app import CommandContext
from pooltree.server.live import LiveScheduler
from pooltree.server.operations import OperationCommands
from pooltree.server.service import SWITCH_INTERVAL, switch_interval
from pooltree.server.store import open_store

SPEC = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
TREES = {"default": {"config": {}, "pools": {"queue": {"max_running_operation_count": 0}}}}


def test_a_queued_operation_is_read_on_the_loop_after_every_start(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 's.db'}"))
    live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    commands = OperationCommands(live, time.time)
    first = live.start_operation("vanilla", SPEC, "alice", 1.0)
    ctx = CommandContext("get_operation", {"operation_id": first.id, "attributes": ["progress"]})
    for count in range(2, 6):
        live.start_operation("vanilla", SPEC, "alice", float(count))
        answer = commands.get_operation_fast(ctx)
        assert answer is not None, "a queued operation's read went to a worker thread"
        info = json.loads(answer.data)["progress"]["scheduling_info_per_pool_tree"]["default"]
        assert info["pending_position"] == 0
        assert info["pending_reason"].endswith(f"position 1 of {count} in its queue")
    live.store.close()


def test_queue_positions_follow_joins_and_departures(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 's.db'}"))
    live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    tree = live.registry.trees["default"]
    ops = [live.start_operation("vanilla", SPEC, "alice", float(i)).id for i in range(5)]

    def positions() -> list[int]:
        holder = tree.operations[ops[-1]].pending_pool
        return [tree.pending_position(holder, op_id) for op_id in ops]

    assert positions() == [0, 1, 2, 3, 4]
    ops += [live.start_operation("vanilla", SPEC, "alice", 10.0 + i).id for i in range(3)]  # joined the tail
    assert positions() == list(range(8))
    live.finish_operation(ops.pop(2), "aborted", 20.0)  # left from the middle: the rest move up
    ops.append(live.start_operation("vanilla", SPEC, "alice", 30.0).id)
    assert positions() == list(range(8))
    live.finish_operation(ops.pop(0), "aborted", 40.0)  # the head left
    assert positions() == list(range(7))
    live.store.close()


@pytest.mark.parametrize(("raw", "expected"), [(None, SWITCH_INTERVAL), ("0.005", 0.005), ("x", SWITCH_INTERVAL),
                                               ("0", SWITCH_INTERVAL), ("5", SWITCH_INTERVAL)])  # fmt: skip
def test_switch_interval(monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: float) -> None:
    if raw is None:
        monkeypatch.delenv("POOLTREE_SWITCH_INTERVAL", raising=False)
    else:
        monkeypatch.setenv("POOLTREE_SWITCH_INTERVAL", raw)
    assert switch_interval() == expected
