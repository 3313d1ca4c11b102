"""``list_operations``'s page taken in memory (``pooltree/server/live/pages.py``): the ids the store would answer,
without its query, and a page of live operations answered on the event loop, byte for byte as a read thread
answers it from the store's rows, while the read threads are busy."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pooltree.config import parse_pool_trees
from pooltree.server.app import COMMAND_THREADS, YIELD_TO_CHEAPER, CommandContext
from pooltree.server.live import LiveScheduler
from pooltree.server.live import pages as pages_module
from pooltree.server.live.pages import PageOrder
from pooltree.server.operations import OperationCommands
from pooltree.server.service import SchedulerService
from pooltree.server.store import OperationFilter, OperationRecord, open_store

FINAL = ("completed", "failed", "aborted")
STATES = ("pending", "running", *FINAL)
TOKEN = "ytct-0000-" + "a9e5" * 8
SPEC = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
ANSWER_WITHIN = 10.0


def _record(rng: random.Random, number: int) -> OperationRecord:
    state = rng.choice(STATES)
    return OperationRecord(
        f"{rng.randrange(1 << 32):08x}-{number:08x}",
        rng.choice(("vanilla", "map")),
        state,
        rng.choice(("alice", "bob", "carol")),
        rng.choice(("a", "b", None)),
        float(rng.randrange(40)),  # many equal start times: ties are ordered by id
        50.0 if state in FINAL else None,
    )


def _queries(rng: random.Random, count: int) -> list[OperationFilter]:
    queries = []
    for _ in range(count):
        queries.append(
            OperationFilter(
                state=rng.choice((None, None, *STATES)),
                user=rng.choice((None, None, "alice", "bob", "dave")),
                pool=rng.choice((None, None, "a", "b")),
                type=rng.choice((None, None, "vanilla", "map")),
                cursor_time=rng.choice((None, None, float(rng.randrange(-1, 42)), rng.randrange(40) + 0.5)),
                cursor_direction=rng.choice(("past", "future")),
                limit=rng.choice((1, 2, 5, 11, 101)),
            )
        )
    return queries


def test_the_page_order_lists_the_ids_the_store_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over random operations (equal start times, every filter column, finished ones dropped past the bound, one
    removed, one queued but not stored), every page the order answers is the store's, and it answers every page
    that does not reach below its horizon."""
    monkeypatch.setattr(pages_module, "FINISHED_KEPT", 60)
    rng = random.Random(25)
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    order = PageOrder()
    records = [_record(rng, number) for number in range(150)]
    for record in records[:100]:
        store.put_operation(record)
    order.load(store.list_operations(OperationFilter(limit=1 << 62)), final_states=FINAL)
    for record in records[100:]:  # written after the load, as the scheduler writes them
        store.put_operation(record)
        order.put(record, final=record.state in FINAL)
    moved = records[101]  # a live operation moves on: its columns follow
    if moved.state not in FINAL:
        moved.state = "completed"
        store.put_operation(moved)
        order.put(moved, final=True)
    store.delete_operation(records[102].id)
    order.forget(records[102].id)
    queued = OperationRecord("ffffffff-00000999", "vanilla", "pending", "alice", "a", 45.0, None)
    order.put(queued, final=False, stored=False)  # its start's commit has not stored it yet: not listed
    assert order.horizon > float("-inf"), "the bound dropped no finished operation"
    answered = 0
    for query in _queries(rng, 1500):
        ids = order.ids(query)
        if ids is None:
            reaches_below = query.cursor_direction == "future" and (
                query.cursor_time is None or query.cursor_time < order.horizon
            )
            assert reaches_below or query.cursor_direction == "past", query
            continue
        answered += 1
        assert ids == store.list_operation_ids(query), query
    assert answered > 200  # the rest reach below the horizon: the store answers them
    newest = OperationFilter(limit=5)
    assert order.ids(newest) == store.list_operation_ids(newest) and queued.id not in (
        order.ids(newest) or []
    )
    store.put_operation(queued)
    order.stored(queued.id)
    assert (order.ids(newest) or [])[:1] == [queued.id] == store.list_operation_ids(newest)[:1]
    store.close()


def test_the_page_order_with_no_bound_answers_every_page(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    order = PageOrder()
    for number in range(120):
        record = _record(rng, number)
        store.put_operation(record)
        order.put(record, final=record.state in FINAL)
    for query in _queries(rng, 600):
        assert order.ids(query) == store.list_operation_ids(query), query
    store.close()


def _listing_answers(listing: Any, parameters: list[dict[str, Any]], fast: bool) -> list[bytes | None]:
    answers = []
    for params in parameters:
        ctx = CommandContext("list_operations", params, user="alice")
        if fast:
            found = listing.list_operations_fast(ctx)
            answers.append(None if found is None else found.data)
        else:
            answers.append(listing.list_operations_encoded(ctx).data)
    return answers


def test_a_page_of_live_operations_is_answered_without_the_store_as_from_its_rows(tmp_path: Path) -> None:
    """The event loop's answer (``list_operations_fast``) reads nothing from the store and is byte for byte the
    read thread's answer made from the store's ids; a page holding a finished operation is left to the thread,
    which reads its rows with one query (its ids are known)."""
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    live = LiveScheduler(store)
    pools = {"queue": {"max_running_operation_count": 1, "max_operation_count": 1000}}
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": pools}}), None, 0.0)
    acl = [{"action": "allow", "subjects": ["alice"], "permissions": ["read"]}]
    ops = [
        live.start_operation("vanilla", {**SPEC, "acl": acl if i % 3 == 1 else []}, user, float(i // 2))
        for i, user in enumerate(["alice", "bob", "bob"] * 4)  # pairs of equal start times
    ]
    live.suspend_operation(ops[4].id, 13.0)
    visible = lambda user, operation_id, owner, spec, runtime: user == owner or bool(spec.get("acl"))  # noqa: E731
    parameters = [
        {"limit": 10},
        {"limit": 3},
        {"limit": 4, "state": "pending"},
        {"limit": 3, "cursor_time": 3.0},
        {"limit": 3, "cursor_time": 2.0, "cursor_direction": "future"},
        {"limit": 20, "cursor_direction": "future"},
        {"limit": 5, "user": "bob", "pool": "queue"},
    ]
    from_rows = OperationCommands(live, lambda: 20.0).listing
    from_rows.visible = visible
    from_rows._memory_ids = lambda query: None  # type: ignore[method-assign]
    expected = _listing_answers(from_rows, parameters, fast=False)

    queries: list[str] = []
    real = {name: getattr(store, name) for name in ("list_operations", "list_operation_ids", "get_operation")}

    def noting(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            queries.append(name)
            return real[name](*args, **kwargs)

        return call

    for name in real:
        setattr(store, name, noting(name))
    in_memory = OperationCommands(live, lambda: 20.0).listing
    in_memory.visible = visible
    assert _listing_answers(in_memory, parameters, fast=True) == expected
    assert queries == [], "the event loop's listing queried the store"
    assert _listing_answers(in_memory, parameters, fast=False) == expected
    assert queries == []
    live.finish_operation(ops[11].id, "completed", 30.0)  # the newest page now holds a finished operation
    assert (
        in_memory.list_operations_fast(CommandContext("list_operations", {"limit": 3}, user="alice")) is None
    )
    assert queries == []
    from_rows_after = _listing_answers(from_rows, parameters[:1], fast=False)
    queries.clear()
    assert _listing_answers(in_memory, parameters[:1], fast=False) == from_rows_after
    assert queries == ["list_operations"]  # one query: its ids came from memory
    store.close()


@contextlib.asynccontextmanager
async def _served(tmp_path: Path) -> AsyncIterator[tuple[SchedulerService, httpx.AsyncClient]]:
    """A started service on a SQLite store and a client of its ASGI app with the superuser's token; both ended
    after."""
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), create_default_tree=True, token=TOKEN
    )
    await service.start()
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.asgi),
        base_url="http://test",
        headers={"Authorization": f"OAuth {TOKEN}"},
        timeout=60,
    )
    try:
        yield service, client
    finally:
        await client.aclose()
        await service.stop()


@pytest.mark.anyio
async def test_a_listing_of_live_operations_does_not_wait_for_a_read_thread(tmp_path: Path) -> None:
    """With every read thread held by listings the store keeps waiting (a text filter reads rows), a listing
    of live operations is still answered: on the event loop."""
    async with _served(tmp_path) as (service, client):
        store = service.scheduler.store
        rows = store.list_operations
        release = threading.Event()
        waiting: list[int] = []

        def held(query: OperationFilter = OperationFilter(), **kwargs: Any) -> list[OperationRecord]:
            if query.limit > 1000:  # the text filter's scan
                waiting.append(1)
                release.wait(60)
            return rows(query, **kwargs)

        store.list_operations = held  # type: ignore[method-assign]
        try:
            start = {
                "operation_type": "vanilla",
                "spec": {"tasks": {"main": {"command": "true", "job_count": 1}}},
            }
            first = await client.post("/api/v4/start_operation", json=start)
            assert first.status_code == 200, first.text
            scans = [
                asyncio.ensure_future(client.get("/api/v4/list_operations", params={"filter": "vanilla"}))
                for _ in range(COMMAND_THREADS + 1)
            ]
            deadline = time.monotonic() + ANSWER_WITHIN
            while len(waiting) < COMMAND_THREADS:  # every read thread waits in the store
                assert time.monotonic() < deadline, "the scans never reached the store"
                await asyncio.sleep(0.01)
            listing = await asyncio.wait_for(client.get("/api/v4/list_operations"), ANSWER_WITHIN)
            assert listing.status_code == 200, listing.text
            assert [op["id"] for op in listing.json()["operations"]] == [first.json()["operation_id"]]
            assert not any(scan.done() for scan in scans)  # the read threads are still held
            release.set()
            answers = await asyncio.gather(*scans)
            assert all(answer.status_code == 200 for answer in answers)
        finally:
            release.set()


@pytest.mark.anyio
async def test_a_read_thread_takes_the_next_command_while_the_event_loop_is_busy(tmp_path: Path) -> None:
    """A worker thread whose command's work is done takes the next queued command at once, while the event loop
    has not yet taken the answer back (the loop is held here): a thread's turn is its command's work, not the
    loop's delay as well."""
    async with _served(tmp_path) as (service, client):
        store = service.scheduler.store
        rows = store.list_operations
        release, last_started = threading.Event(), threading.Event()
        started: list[int] = []

        def held(query: OperationFilter = OperationFilter(), **kwargs: Any) -> list[OperationRecord]:
            if query.limit > 1000:  # the text filter's scan
                started.append(1)
                if len(started) > COMMAND_THREADS:
                    last_started.set()
                else:
                    release.wait(60)
            return rows(query, **kwargs)

        store.list_operations = held  # type: ignore[method-assign]
        try:
            scans = [
                asyncio.ensure_future(client.get("/api/v4/list_operations", params={"filter": "vanilla"}))
                for _ in range(COMMAND_THREADS + 1)
            ]
            deadline = time.monotonic() + ANSWER_WITHIN
            while len(started) < COMMAND_THREADS:  # every read thread is held; one more scan is queued
                assert time.monotonic() < deadline, "the scans never reached the store"
                await asyncio.sleep(0.01)
            for _ in range(100):  # turns of the loop: the last scan reaches its queue
                await asyncio.sleep(0)
            release.set()
            # the loop is held (no await) until the queued scan has started on a thread, or for ANSWER_WITHIN
            took_next = last_started.wait(ANSWER_WITHIN)
            assert took_next, "the queued command waited for the event loop to take a finished one's answer"
            answers = await asyncio.gather(*scans)
            assert all(answer.status_code == 200 for answer in answers)
        finally:
            release.set()


@pytest.mark.anyio
async def test_a_listing_lets_the_gets_waiting_on_the_event_loop_go_first(tmp_path: Path) -> None:
    """A listing answered on the event loop (``fast_yields``) lets the ``get_operation`` requests that came in with
    it go first (``YtApi.after_cheaper_reads``)."""
    async with _served(tmp_path) as (service, client):
        start = {
            "operation_type": "vanilla",
            "spec": {"tasks": {"main": {"command": "true", "job_count": 1}}},
        }
        ids = [
            (await client.post("/api/v4/start_operation", json=start)).json()["operation_id"]
            for _ in range(3)
        ]
        fast = service.app.state.registry._fast
        answered: list[str] = []
        for name in ("get_operation", "list_operations"):

            def recorded(ctx: CommandContext, name: str = name, handler: Any = fast[name]) -> Any:
                answered.append(name)
                return handler(ctx)

            fast[name] = recorded
        # one listing, then six gets, sent in that order in one turn of the loop
        listing = asyncio.ensure_future(client.get("/api/v4/list_operations"))
        gets = [
            asyncio.ensure_future(client.get("/api/v4/get_operation", params={"operation_id": i}))
            for i in ids * 2
        ]
        answers = await asyncio.wait_for(asyncio.gather(listing, *gets), ANSWER_WITHIN)
        assert answered == ["get_operation"] * 6 + ["list_operations"]
        assert [answer.json()["id"] for answer in answers[1:]] == ids * 2
        assert {op["id"] for op in answers[0].json()["operations"]} == set(ids)


@pytest.mark.anyio
async def test_a_listing_yields_to_cheaper_reads_for_a_bounded_time(tmp_path: Path) -> None:
    """``YtApi.after_cheaper_reads`` yields turns of the event loop while the last one answered a cheaper read: one
    turn on a quiet loop, and under a stream answered every turn at most ``YIELD_TO_CHEAPER`` (not the stream's
    length)."""
    async with _served(tmp_path) as (service, _client):
        api = service.app.state.api
        loop = asyncio.get_running_loop()
        turns = 0
        counting = True

        async def count() -> None:  # the turns of the loop
            nonlocal turns
            while counting:
                turns += 1
                await asyncio.sleep(0)

        counter = asyncio.ensure_future(count())
        await asyncio.sleep(0)
        before = turns
        await api.after_cheaper_reads()  # quiet: no cheaper read answered (bounded by itself)
        assert turns - before <= 2  # left after its one turn
        counting = False
        await asyncio.wait_for(counter, ANSWER_WITHIN)
        streaming = True

        async def stream() -> None:  # a cheaper read answered on every turn of the loop
            while streaming:
                api._cheap_answers += 1
                await asyncio.sleep(0)

        streamer = asyncio.ensure_future(stream())
        try:
            await asyncio.sleep(0)
            began = loop.time()
            await asyncio.wait_for(api.after_cheaper_reads(), ANSWER_WITHIN)
            waited = loop.time() - began
            assert not streamer.done()  # the stream still ran
        finally:
            streaming = False
            await asyncio.wait_for(streamer, ANSWER_WITHIN)
        assert YIELD_TO_CHEAPER <= waited < ANSWER_WITHIN / 2, waited
