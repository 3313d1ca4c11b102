"""Issue 13: the work of a request does not grow with the queue.

Starting operations into a pool with running limit 0 runs no fair-share update per start (counted by
``FairShareUpdates.fair_share_updates``), the queued operations still run once the limit is raised, and
``list_operations`` pages with one indexed store query and takes its counters from the in-memory counts.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Container
from pathlib import Path
from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.errors import ConfigError
from pooltree.server.app import CommandContext
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.operation_times import iso_time
from pooltree.server.operations import OperationCommands
from pooltree.server.store import OperationFilter, OperationRecord, Store, open_store

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 8 << 30}
SPEC = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}


def _trees(limit: int) -> dict[str, Any]:
    pools = {"queue": {"max_running_operation_count": limit, "max_operation_count": 1000}, "other": {}}
    return parse_pool_trees({"default": {"config": {}, "pools": pools}})


def test_starts_into_a_full_pool_run_no_update_and_run_when_the_limit_is_raised(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), fair_share_update_period=0.5)
    live.apply_pool_trees(_trees(0), None, 0.0)
    assert live.fair_share_update_period("default") == 0.5
    live.update_fair_share("default", 0.0)
    assert live.updates.fair_share_updates["default"] == 1
    ops = [live.start_operation("vanilla", SPEC, "alice", 0.01 * i) for i in range(200)]
    assert {op.state for op in ops} == {"pending"}
    assert live.updates.fair_share_updates["default"] == 1  # 200 starts, no update
    # pending operations change no share: nothing runs, nothing changed, no update is due
    assert not live.needs_update("default", 5.0, 0.5)
    view = live.views["default"]["operations"]
    assert len(view) == 200 and view[ops[7].id]["pending_position"] == 7  # the orchid shows them all the same
    assert view[ops[7].id]["fair_share_ratio"] == 0.0
    live.update_fair_share("default", 5.0)
    assert live.views["default"]["operations"][ops[7].id]["pending_position"] == 7

    live.apply_pool_trees(_trees(3), None, 6.0)
    assert [op.state for op in ops[:4]] == ["running", "running", "running", "pending"]
    response = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS}), 6.1)
    assert {start["operation_id"] for start in response["start"]} == {op.id for op in ops[:3]}
    assert live.needs_update("default", 6.7, 0.5)  # operations run: usage moves with time


def test_the_update_period_is_checked(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    for bad in (0.0, 0.001, 61.0, True):
        with pytest.raises(ConfigError, match="fair_share_update_period"):
            LiveScheduler(store, fair_share_update_period=bad)  # type: ignore[arg-type]


def test_an_operation_that_can_run_starts_in_the_next_heartbeat(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(_trees(0), None, 0.0)
    live.update_fair_share("default", 0.0)
    op = live.start_operation("vanilla", {**SPEC, "pool": "other"}, "alice", 0.1)
    assert op.state == "running" and live.updates.fair_share_updates["default"] == 1
    assert live.needs_update("default", 0.11, 0.5)  # due at once, not at the period
    response = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS}), 0.2)
    assert [start["operation_id"] for start in response["start"]] == [op.id]
    assert live.updates.fair_share_updates["default"] == 2


class CountingStore:
    """A store wrapper that records how many operation rows each listing read."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.rows_read: list[int] = []

    def list_operations(
        self, query: OperationFilter = OperationFilter(), *, known: Container[str] = ()
    ) -> list[OperationRecord]:
        records = self._store.list_operations(query, known=known)
        self.rows_read.append(len(records))
        return records

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


STATES = ("completed", "failed", "aborted")


def _stored(count: int, seed: int) -> list[OperationRecord]:
    rng = random.Random(seed)
    records = []
    for i in range(count):
        pool = rng.choice(["a", "b", "c"])
        failed = rng.random() < 0.2
        records.append(
            OperationRecord(
                f"op-{i:05d}",
                rng.choice(["vanilla", "map"]),
                rng.choice(STATES),
                rng.choice(["alice", "bob", "carol"]),
                pool,
                1000.0 + i,
                1000.5 + i,
                spec={"title": f"job {i}"},
                document={"pools": {"default": pool}, "progress": {"failed": 1 if failed else 0}},
            )
        )
    return records


def _expected_counters(records: list[OperationRecord], filters: dict[str, Any]) -> dict[str, Any]:
    """YTsaurus's counting rule by brute force: a counter counts what fails no filter but its own."""
    dims = {
        "pool": lambda r: r.pool,
        "user": lambda r: r.user,
        "state": lambda r: r.state,
        "type": lambda r: r.type,
    }
    counts: dict[str, Counter[str]] = {name: Counter() for name in dims}
    failed = 0
    for record in records:
        failing = [name for name, get in dims.items() if filters.get(name) not in (None, get(record))]
        has_failed = bool(record.document["progress"]["failed"])
        for name, get in dims.items():
            if not failing or failing == [name]:
                counts[name][get(record)] += 1
        if not failing and has_failed:
            failed += 1
    return {
        "pool_counts": dict(counts["pool"]),
        "user_counts": dict(counts["user"]),
        "state_counts": dict(counts["state"]),
        "type_counts": dict(counts["type"]),
        "failed_jobs_count": failed,
    }


@pytest.mark.parametrize(
    "filters", [{}, {"state": "failed"}, {"user": "bob", "pool": "c"}, {"type": "map", "state": "aborted"}]
)
def test_list_operations_pages_and_counts_without_reading_every_operation(
    tmp_path: Path, filters: dict[str, Any]
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    records = _stored(1500, seed=len(filters))
    for record in records:
        store.put_operation(record)
    counting = CountingStore(store)
    live = LiveScheduler(counting)  # type: ignore[arg-type]
    commands = OperationCommands(live, lambda: 10_000.0)
    counting.rows_read.clear()

    matching = [r for r in records if all(getattr(r, k) == v for k, v in filters.items())]
    matching.sort(key=lambda r: (r.start_time, r.id), reverse=True)
    seen: list[str] = []
    cursor: float | None = None
    while True:
        parameters = {**filters, "limit": 100}
        if cursor is not None:
            parameters["cursor_time"] = cursor
        page = commands.listing.list_operations(CommandContext("list_operations", parameters))
        assert {k: page[k] for k in _expected_counters(records, filters)} == _expected_counters(
            records, filters
        )
        ids = [o["id"] for o in page["operations"]]
        seen.extend(ids)
        assert len(ids) <= 100
        if not page["incomplete"]:
            break
        assert len(ids) == 100
        cursor = min(float(records[int(i.split("-")[1])].start_time) for i in ids)
    assert seen == [r.id for r in matching]
    assert max(counting.rows_read) <= 101  # one page (+1 to tell incomplete) per call, never the whole table


def test_list_operations_counts_follow_live_operations(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    for record in _stored(50, seed=7):
        store.put_operation(record)
    live = LiveScheduler(store)
    live.apply_pool_trees(_trees(0), None, 0.0)
    commands = OperationCommands(live, lambda: 10_000.0)
    ops = [live.start_operation("vanilla", SPEC, "dave", 5000.0 + i) for i in range(5)]
    listed = commands.listing.list_operations(CommandContext("list_operations", {"user": "dave", "limit": 3}))
    assert [o["id"] for o in listed["operations"]] == [op.id for op in reversed(ops)][:3]
    for item in (
        *listed["operations"],
        *commands.listing.list_operations(CommandContext("list_operations", {}))["operations"],
    ):
        full = commands.operation_attributes(item["id"])
        assert item == {key: full[key] for key in item} and set(item) <= set(full)  # brief = get_operation's
    assert listed["incomplete"] and listed["state_counts"] == {"pending": 5}
    assert listed["pool_counts"] == {"queue": 5}
    live.finish_operation(ops[0].id, "aborted", 6000.0)
    listed = commands.listing.list_operations(
        CommandContext("list_operations", {"user": "dave", "state": "pending"})
    )
    assert listed["state_counts"] == {"pending": 4, "aborted": 1}
    assert len(listed["operations"]) == 4 and not listed["incomplete"]
    assert listed["user_counts"] == {"dave": 4}  # every pending operation, of any user
    # a restarted scheduler counts what the store holds
    again = OperationCommands(LiveScheduler(store), lambda: 10_000.0)
    counted = again.listing.list_operations(CommandContext("list_operations", {"user": "dave"}))
    assert counted["state_counts"] == {"pending": 4, "aborted": 1}
    text = again.listing.list_operations(CommandContext("list_operations", {"filter": "JOB 1"}))
    assert {o["id"] for o in text["operations"]} == {f"op-{i:05d}" for i in (1, *range(10, 20))}


def test_listed_live_operations_are_not_decoded_and_one_finished_meanwhile_is_read_whole(
    tmp_path: Path,
) -> None:
    """A page's live operations are briefed from memory (their stored bodies are not decoded); one that
    finished between the page query and the briefing is read whole from the store."""
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    live = LiveScheduler(store)
    live.apply_pool_trees(_trees(0), None, 0.0)
    spec = {**SPEC, "title": "queued"}
    ops = [live.start_operation("vanilla", spec, "alice", float(i)) for i in range(3)]
    page = store.list_operations(OperationFilter(limit=10), known=live.operations)
    assert [r.partial for r in page] == [True, True, True] and page[0].spec == {}
    commands = OperationCommands(live, lambda: 10.0)
    live.finish_operation(ops[2].id, "aborted", 5.0)  # newest first: page[0] is ops[2]
    whole = commands.listing._whole(page[0])
    assert not whole.partial and whole.state == "aborted" and whole.spec["title"] == "queued"
    assert commands.listing._whole(page[1]).spec["title"] == "queued"  # a live one takes memory's spec
    listed = commands.listing.list_operations(CommandContext("list_operations", {"limit": 10}))["operations"]
    assert [(o["id"], o["state"], o["brief_spec"]["title"]) for o in listed] == [
        (ops[2].id, "aborted", "queued"),
        (ops[1].id, "pending", "queued"),
        (ops[0].id, "pending", "queued"),
    ]
    store.close()


def test_listed_finished_operations_are_kept_and_answer_as_a_fresh_listing_does(tmp_path: Path) -> None:
    """A finished operation listed once is kept (slimmed to what a brief reads): a later page does not decode its
    body again and answers byte for byte what a listing reading every body answers, in every output format and
    with a user who sees only some of the operations; a kept one whose row changed is read anew."""
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    live = LiveScheduler(store)
    live.apply_pool_trees(_trees(1), None, 0.0)
    ops = [
        live.start_operation("vanilla", {**SPEC, "title": f"op {i}", "acl": acl}, user, float(i))
        for i, (user, acl) in enumerate(
            [
                ("alice", []),
                ("bob", [{"action": "allow", "subjects": ["alice"], "permissions": ["read"]}]),
                ("bob", []),
            ]
            * 2
        )
    ]
    live.finish_operation(ops[0].id, "completed", 10.0)
    live.finish_operation(ops[1].id, "failed", 11.0, error={"message": "broken"})
    live.finish_operation(ops[2].id, "aborted", 12.0)
    live.suspend_operation(ops[4].id, 13.0)
    bodies: list[str] = []
    read_bodies = store._bodies  # type: ignore[attr-defined]

    def noting(operation_ids: list[str]) -> dict[str, str]:
        bodies.extend(operation_ids)
        return read_bodies(operation_ids)

    store._bodies = noting  # type: ignore[attr-defined]
    kept = OperationCommands(live, lambda: 20.0).listing
    visible = lambda user, operation_id, owner, spec, runtime: user == owner or bool(spec.get("acl"))  # noqa: E731
    kept.visible = visible
    formats = [None, {"$value": "json", "$attributes": {"format": "pretty"}}, "yson"]

    def answers(listing: Any) -> list[bytes]:
        found = []
        for fmt in formats:
            for params in ({"limit": 10}, {"limit": 2}, {"limit": 10, "state": "completed"}):
                ctx = CommandContext(
                    "list_operations",
                    {**params, **({} if fmt is None else {"output_format": fmt})},
                    user="alice",
                )
                found.append(listing.list_operations_encoded(ctx).data)
        return found

    first = answers(kept)
    assert ops[2].id not in first[0].decode() and ops[1].id in first[0].decode()  # alice sees only some
    assert set(bodies) == {op.id for op in ops[:3]}
    bodies.clear()
    again = answers(kept)
    assert bodies == [] and again == first  # nothing decoded: the kept records
    fresh = OperationCommands(live, lambda: 20.0).listing
    fresh.visible = visible
    assert answers(fresh) == first and set(bodies) == {op.id for op in ops[:3]}
    # a kept operation's row changed (another finish time): read anew
    record = store.get_operation(ops[0].id)
    assert record is not None
    record.finish_time, record.document = 14.0, {**record.document, "progress": {"completed": 7}}
    store.put_operation(record)
    changed = kept.list_operations(CommandContext("list_operations", {"limit": 10}, user="alice"))
    listed = {o["id"]: o for o in changed["operations"]}
    assert listed[ops[0].id]["brief_progress"]["jobs"]["completed"] == 7
    assert listed[ops[0].id]["finish_time"] == iso_time(14.0)
    store.close()


def test_a_page_of_live_operations_reads_no_rows_and_answers_as_the_rows_do(tmp_path: Path) -> None:
    """A page whose operations are all live is made from memory in the store's order (its ids, one row): no
    operation row is read, and every answer is byte for byte the one made from the rows, in each output format,
    paging both ways, filtered by state, with a user who sees only some; a page with a finished operation reads
    its rows as before."""
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    live = LiveScheduler(store)
    live.apply_pool_trees(_trees(1), None, 0.0)
    acl = [{"action": "allow", "subjects": ["alice"], "permissions": ["read"]}]
    ops = [
        live.start_operation(
            "vanilla", {**SPEC, "title": f"op {i}", "acl": acl if i % 3 == 1 else []}, user, float(i)
        )
        for i, user in enumerate(["alice", "bob", "bob"] * 3)
    ]
    live.suspend_operation(ops[4].id, 13.0)
    read_rows: list[OperationFilter] = []
    rows = store.list_operations

    def noting(query: OperationFilter = OperationFilter(), **kwargs: Any) -> list[OperationRecord]:
        read_rows.append(query)
        return rows(query, **kwargs)

    store.list_operations = noting  # type: ignore[method-assign]
    visible = lambda user, operation_id, owner, spec, runtime: user == owner or bool(spec.get("acl"))  # noqa: E731
    parameters = [
        {"limit": 10},
        {"limit": 3},
        {"limit": 4, "state": "pending"},
        {"limit": 3, "cursor_time": 4.0},
        {"limit": 3, "cursor_time": 4.0, "cursor_direction": "future"},
    ]
    formats = [None, {"$value": "json", "$attributes": {"format": "pretty"}}, "yson"]

    def answers(listing: Any) -> list[bytes]:
        return [
            listing.list_operations_encoded(
                CommandContext(
                    "list_operations",
                    {**params, **({} if fmt is None else {"output_format": fmt})},
                    user="alice",
                )
            ).data
            for fmt in formats
            for params in parameters
        ]

    from_memory = OperationCommands(live, lambda: 20.0).listing
    from_memory.visible = visible
    first = answers(from_memory)
    assert read_rows == [], "a page of live operations read the operations' rows"
    assert ops[0].id in first[0].decode() and ops[2].id not in first[0].decode()  # alice sees only some
    from_rows = OperationCommands(live, lambda: 20.0).listing
    from_rows.visible = visible
    from_rows._live_page = lambda ids, direction: None  # type: ignore[method-assign]
    assert answers(from_rows) == first
    assert len(read_rows) == len(first)
    read_rows.clear()
    live.finish_operation(ops[8].id, "completed", 30.0)  # the newest page now holds a finished operation
    assert answers(from_memory)[0] == answers(from_rows)[0]
    assert read_rows, "a page with a finished operation is listed from its rows"
    store.close()
