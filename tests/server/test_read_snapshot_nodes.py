"""The read snapshot's nodes (``snapshot.NodeCapture``): taken column by column under the scheduling lock and made
into ``NodeRead`` s off it on first read, they equal what the reads made under the lock showed (the old
``_node_reads``, kept here as the reference) at the publication, however the nodes changed before the first read:
usage the strategy changes in place, last heartbeats, running jobs, a node in no tree. A snapshot replaced inside
an update's hold is freed after it."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import numpy as np

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.live.snapshot import RETIRED_MAX, NodeRead, ReadSnapshot
from pooltree.server.store import open_store

TREES = {
    "default": {"config": {"node_tag_filter": "cpu"}, "pools": {}},
    "gpu": {"config": {"node_tag_filter": "gpu"}, "pools": {}},
}
NODES = {"n1": ["cpu"], "n2": ["cpu"], "g1": ["gpu"], "plain": []}
"""Two nodes of tree default, one of tree gpu, one of no tree."""


def _heartbeat(scheduler: LiveScheduler, address: str, now: float) -> None:
    data = {
        "node_address": address,
        "resource_limits": {"user_slots": 8, "cpu": 8, "memory": 16 << 30},
        "tags": NODES[address],
    }
    scheduler.process_heartbeat(parse_heartbeat(data), now)


def _all_heartbeat(scheduler: LiveScheduler, now: float) -> None:
    for address in NODES:
        _heartbeat(scheduler, address, now)


def _update(scheduler: LiveScheduler, now: float) -> None:
    for tree in list(scheduler.cores):
        scheduler.update_fair_share(tree, now)


def _reference_node_reads(scheduler: LiveScheduler) -> tuple[NodeRead, ...]:
    """The nodes' reads as the capture made them under the lock before ``NodeCapture`` (session 35)."""
    exec_nodes = {tree: core.strategy.nodes for tree, core in scheduler.cores.items()}
    running_jobs = scheduler.jobs.count_on_node
    reads = []
    for address, node in scheduler.nodes.items():
        usage = None
        for tree in node.trees:
            exec_node = exec_nodes[tree].get(address) if tree in exec_nodes else None
            if exec_node is not None:
                usage = exec_node.usage.copy() if usage is None else usage + exec_node.usage
        reads.append(
            NodeRead(
                address,
                node.resource_limits,
                tuple(node.trees),
                node.tags,
                node.last_seen,
                node.alerts,
                usage,
                running_jobs(address),
            )
        )
    return tuple(reads)


def _comparable(reads: tuple[NodeRead, ...]) -> list[tuple[Any, ...]]:
    """``reads`` with their arrays as (dtype, values), to compare with ``==``."""
    return [
        tuple(
            (str(value.dtype), value.tolist()) if isinstance(value, np.ndarray) else value for value in read
        )
        for read in reads
    ]


def test_published_nodes_equal_the_reads_made_under_the_lock_at_the_publication(tmp_path: Path) -> None:
    scheduler = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    scheduler.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    assert scheduler.snapshots.current.nodes == ()  # nothing published: no node
    _all_heartbeat(scheduler, 1.0)
    scheduler.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 3, "cpu_limit": 1}}}, "root", 1.0
    )
    _update(scheduler, 1.5)
    _all_heartbeat(scheduler, 2.0)  # the operation's jobs start
    _update(scheduler, 2.5)
    first: ReadSnapshot = scheduler.snapshots.current
    first_reference = _reference_node_reads(scheduler)
    assert sum(read.running_jobs for read in first_reference) == 3
    assert [read.trees for read in first_reference] == [("default",), ("default",), ("gpu",), ()]

    scheduler.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 10, "cpu_limit": 1}}}, "root", 3.0
    )
    _update(scheduler, 3.5)
    second = scheduler.snapshots.current
    second_reference = _reference_node_reads(scheduler)
    _all_heartbeat(scheduler, 4.0)  # more jobs start: the strategy changes the nodes' usage in place
    now_reads = _reference_node_reads(scheduler)
    assert _comparable(now_reads) != _comparable(second_reference)
    assert [read.usage.tolist() for read in now_reads if read.usage is not None] != [
        read.usage.tolist() for read in second_reference if read.usage is not None
    ]

    assert second is not first
    # read for the first time only now, after the nodes changed: each shows its publication's state
    assert _comparable(first.nodes) == _comparable(first_reference)
    assert _comparable(second.nodes) == _comparable(second_reference)
    assert first.nodes is first.nodes  # made once per snapshot
    scheduler.store.close()


def test_a_replaced_snapshot_is_freed_out_of_the_hold_that_replaced_it(tmp_path: Path) -> None:
    """A publication inside a hold (an update's) keeps the snapshot it replaced until the hold ends
    (``ReadPublisher.release_retired``): freeing it cost the hold ms at 1,000 nodes live. The update frees them
    when its holds end; a caller that never does keeps at most ``RETIRED_MAX``."""
    scheduler = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    scheduler.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    _all_heartbeat(scheduler, 1.0)
    _update(scheduler, 1.5)
    publisher = scheduler.snapshots
    assert publisher.retired == []  # the update freed what its publications replaced
    before = weakref.ref(publisher.current)
    with scheduler.lock:
        published = publisher.publish()
        assert publisher.current is published
        assert before() is not None and publisher.retired == [before()]  # kept while the hold lasts
    publisher.release_retired()
    assert publisher.retired == []
    assert before() is None  # freed, here, out of the hold
    with scheduler.lock:
        for _ in range(RETIRED_MAX + 3):
            publisher.publish()
        assert len(publisher.retired) == RETIRED_MAX
    publisher.publish()  # a publication out of any hold frees them itself
    assert publisher.retired == []
    scheduler.store.close()
