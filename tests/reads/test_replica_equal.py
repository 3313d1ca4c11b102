"""The read process's replica (``pooltree/reads/replica.py``) fed by the scheduler's feed (``feed.py``) answers
``get_operation`` byte for byte as the scheduler's own pipeline does at the same state and clock (the request id
aside: each process numbers its own), denials too; a replica behind the floor holds a get (the read process waits
for the next tick) and then answers it as the scheduler does.

The scheduler is a real ``SchedulerService`` in process driven by seeded random steps (starts by three users, with
and without ACLs, aborts, completions, suspends, resumes, weight and pool changes, fair-share updates, pool limit
changes); after each step the feed's tick is applied and every pending operation is asked for by every user in
several request shapes: each answer the replica gives must equal the scheduler's, and a get it relays is answered by
the scheduler (which makes the feed send its template, as a read process's miss does).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import random
import re
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from pooltree.errors import PooltreeError
from pooltree.reads import feed as feed_module
from pooltree.reads import wire
from pooltree.reads.feed import ReadFeed
from pooltree.reads.replica import Replica
from pooltree.reads.seam import ReadRequest
from pooltree.server.commands import CommandContext
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

ROOT_TOKEN = "ytct-0000-" + "9a9a" * 8
NOW = 1_700_000_000.0
POOLS = ("queue", "other")
USERS = ("root", "alice", "bob")
SHAPES: tuple[tuple[str | None, str | None], ...] = (
    (None, None),
    ('["id"; "state"; "progress"]', None),
    ('["progress"; "scheduling_forecast"; "brief_progress"]', None),
    (None, '"json"'),  # with ``suppress_transaction_coordinator_sync``: what ``yt.wrapper`` sends
    ('["id"]', "<format=text>yson"),  # not templated: always relayed
)


class _Clock:
    """The scheduler's and the replica's clock, moved by a test (``NOW`` unless moved)."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> _Clock:
    return _Clock()


@pytest.fixture
def service(tmp_path: Path, clock: _Clock) -> Iterator[SchedulerService]:
    made = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        token=ROOT_TOKEN,
        clock=clock,
    )
    asyncio.run(made.start())
    for pool in POOLS:
        made.cypress.create(
            "scheduler_pool",
            None,
            attributes={"name": pool, "pool_tree": "default", "max_running_operation_count": 1},
        )
    forecasts = made.commands.forecasts
    if forecasts is not None:
        # the first forecast is made before the steps: with the clock fixed, a forecast made later would carry the
        # same mark as the one before it (``_forecast_mark``: its time, its error)
        forecasts.read()
        deadline = time.monotonic() + 60
        while forecasts.latest is None and forecasts.last_error is None:
            assert time.monotonic() < deadline, "no forecast within 60 s"
            time.sleep(0.05)
    try:
        yield made
    finally:
        asyncio.run(made.stop())
        made.store.close()


def _tokens(service: SchedulerService) -> dict[str, str]:
    tokens = {"root": ROOT_TOKEN}
    for user in ("alice", "bob"):
        service.security.directory.create_user(user)
        tokens[user] = service.security.directory.issue_token(user)
    return tokens


def _request(operation_id: str, token: str, shape: tuple[str | None, str | None]) -> ReadRequest:
    attributes, fmt = shape
    parameters = f'"operation_id"="{operation_id}"'
    if attributes is not None:
        parameters += f'; "attributes"={attributes}'
    if fmt is not None:
        parameters += f'; "output_format"={fmt}'
    if fmt == '"json"':
        parameters = '"suppress_transaction_coordinator_sync"=%false; ' + parameters
    headers = (
        ("host", "localhost"),
        ("authorization", f"OAuth {token}"),
        ("x-yt-header-format", "<format=text>yson"),
        ("x-yt-parameters", "{" + parameters + "}"),
    )
    return ReadRequest(
        b"GET",
        b"/api/v4/get_operation",
        tuple((name.encode(), value.encode()) for name, value in headers),
        b"",
        ("127.0.0.1", 50000),
        True,
    )


def scheduler_answer(service: SchedulerService, request: ReadRequest) -> bytes:
    """The scheduler's own answer to ``request`` through its ASGI entry, written as uvicorn writes it (default
    headers ``date`` at the scheduler's clock and ``server``, then the answer's headers, then the body)."""
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": request.body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method.decode(),
        "scheme": "http",
        "path": request.target.decode(),
        "raw_path": request.target,
        "query_string": b"",
        "root_path": "",
        "headers": list(request.headers),
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(service.asgi(scope, receive, send))
    start, body = messages[0], b"".join(m.get("body", b"") for m in messages[1:])
    status = start["status"]
    head = [b"HTTP/1.1 %d %s\r\n" % (status, http.HTTPStatus(status).phrase.encode())]
    defaults = [(b"date", formatdate(service.clock(), usegmt=True).encode()), (b"server", b"uvicorn")]
    for name, value in [*defaults, *start["headers"]]:
        head.append(name + b": " + value + b"\r\n")
    return b"".join(head) + b"\r\n" + body


_REQUEST_ID = re.compile(rb"x-yt-request-id: [0-9a-f]+\r\n")


def _same(answer: bytes) -> bytes:
    return _REQUEST_ID.sub(b"x-yt-request-id: -\r\n", answer)


class _ReadProcess:
    """The read process's part in the test: the replica, the highest stamp relayed, relays to the scheduler."""

    def __init__(self, service: SchedulerService, feed: ReadFeed) -> None:
        self.service = service
        self.feed = feed
        self.replica = Replica(clock=service.clock)
        self.floor = 0
        self.compared = 0
        self.denied = 0
        self.relayed = 0

    def deliver(self, batch: Any) -> None:
        """The feed's ``send``: a stamp's tick reaches the replica at once (as the pipe brings it)."""
        self.replica.apply(wire_roundtrip(batch))

    def sync(self) -> None:
        """The feed thread's tick."""
        with self.feed.ticking():
            self.deliver(self.feed.tick())

    def get(self, request: ReadRequest) -> None:
        answer = self.replica.answer(request, self.floor)
        expected = scheduler_answer(self.service, request)
        if answer is None:
            self.relayed += 1
            self.floor = max(self.floor, self.feed.stamp())
            self.sync()  # the feed's next tick (the read process waits for it before it answers again)
            return
        assert _same(answer) == _same(expected), (request, answer, expected)
        self.compared += 1
        self.denied += b"x-yt-response-code: 901\r\n" in answer


def wire_roundtrip(message: Any) -> Any:
    """A message as the read process gets it: through JSON (pickled on the pipe: JSON is the stricter)."""
    return json.loads(json.dumps(message))


def _ctx(operation_id: str, **parameters: Any) -> CommandContext:
    return CommandContext("x", {"operation_id": operation_id, **parameters}, user="root")


def _step(service: SchedulerService, rng: random.Random, users: tuple[str, ...]) -> None:
    scheduler, commands = service.scheduler, service.commands
    live = sorted(scheduler.operations)
    pending = [i for i in live if scheduler.operations[i].state == "pending"]
    kind = rng.choice(
        ["start"] * 5 + ["abort", "complete", "suspend", "resume", "weight", "pool", "update", "limit"]
    )
    if kind == "start" or not live:
        user = rng.choice(users)
        spec: dict[str, Any] = {
            "pool": rng.choice(POOLS),
            "tasks": {"main": {"command": "true", "job_count": 1}},
        }
        if rng.random() < 0.4:
            spec["acl"] = [{"action": "deny", "subjects": ["bob"], "permissions": ["read"]}]
        scheduler.start_operation("vanilla", spec, user, NOW)
        return
    target = rng.choice(pending or live)
    if kind == "abort":
        commands.abort_operation(_ctx(target))
    elif kind == "complete":
        commands.complete_operation(_ctx(target))
    elif kind == "suspend":
        commands.suspend_operation(_ctx(target))
    elif kind == "resume":
        commands.resume_operation(_ctx(target))
    elif kind == "weight":
        commands.update_operation_parameters(_ctx(target, parameters={"weight": rng.choice([1.0, 2.0, 3.5])}))
    elif kind == "pool":
        commands.update_operation_parameters(_ctx(target, parameters={"pool": rng.choice(POOLS)}))
    elif kind == "update":
        scheduler.updates.update_tree("default", NOW + rng.random())
    else:
        pool = rng.choice(POOLS)
        service.cypress.set(
            f"//sys/pool_trees/default/{pool}/@max_running_operation_count", rng.choice([0, 1, 2])
        )


def _listening(service: SchedulerService) -> ReadFeed:
    """The service's feed as the runner makes it, told of reads, changes, finishes and pool tree changes."""
    feed = ReadFeed(service.scheduler, service.commands, service.security, service.app.state.api.host)
    feed.listen(service.cypress.subscribe)
    return feed


def _attached(service: SchedulerService, feed: ReadFeed, replica: Replica | None = None) -> _ReadProcess:
    """A read process in the test's hands attached to ``feed`` (the test ticks it itself: ``_ReadProcess.sync``)."""
    process = _ReadProcess(service, feed)
    if replica is not None:
        process.replica = replica
    feed.attach(process.deliver, ticking=False)
    return process


def _drive(service: SchedulerService, seed: int, replica: Replica | None = None) -> _ReadProcess:
    """Seeded steps, after each a get of up to 6 pending operations by every user in every shape (``_ReadProcess``
    compares every answer the replica gives with the scheduler's)."""
    tokens = _tokens(service)
    process = _attached(service, _listening(service), replica)
    rng = random.Random(seed)
    for _ in range(60):
        with contextlib.suppress(PooltreeError):  # a refused change (a pool's limit, a finished operation)
            _step(service, rng, USERS)
        process.sync()
        pending = [i for i, op in sorted(service.scheduler.operations.items()) if op.state == "pending"]
        for operation_id in rng.sample(pending, min(len(pending), 6)):
            for user in USERS:
                for shape in SHAPES:
                    process.get(_request(operation_id, tokens[user], shape))
        process.sync()  # what the relayed gets asked for
    return process


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_replica_answers_as_the_scheduler_does(service: SchedulerService, seed: int) -> None:
    process = _drive(service, seed)
    assert process.compared > 300, process.compared
    assert process.denied > 0
    assert process.replica.refused == 0
    assert process.feed.counts.warmed > 0  # templates made before a get asked are compared too


class _DeafToVoids(Replica):
    """A wrong replica: it keeps a template after the scheduler voided it."""

    def apply(self, message: Any) -> None:
        super().apply([one for one in message if one.get("kind") != wire.VOID])


def test_a_replica_that_keeps_void_templates_is_caught(service: SchedulerService) -> None:
    """The comparison can fail: a replica deaf to voids answers a changed operation as it was."""
    with pytest.raises(AssertionError):
        _drive(service, 1, _DeafToVoids(clock=lambda: NOW))


def test_a_replica_behind_the_floor_relays(service: SchedulerService) -> None:
    tokens = _tokens(service)
    feed = _listening(service)
    process = _attached(service, feed)
    spec = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
    service.scheduler.start_operation("vanilla", spec, "root", NOW)
    op = service.scheduler.start_operation("vanilla", spec, "root", NOW)  # pending: the pool runs one
    request = _request(op.id, tokens["alice"], SHAPES[0])
    process.sync()
    process.get(request)  # a miss: relayed, its template sent at the next tick
    assert process.relayed == 1 and process.compared == 0
    process.get(request)
    assert process.compared == 1
    assert feed.stamp() == process.replica.counter  # nothing moved: an answer relayed now asks for no tick
    service.scheduler.start_operation("vanilla", spec, "root", NOW)  # the queue grows
    with feed.ticking():  # the feed's thread is mid-tick: the start's answer is stamped with the next one
        stamp = feed.stamp()
    assert stamp == process.replica.counter + 1
    assert process.replica.holds(request, stamp)  # the read process holds it for the next tick
    assert process.replica.answer(request, stamp) is None
    process.sync()
    # the held get is asked again: the scheduler's answer now
    assert not process.replica.holds(request, stamp)
    answer = process.replica.answer(request, stamp)
    assert answer is not None and b"position 1 of 2 in its queue" in answer
    assert _same(answer) == _same(scheduler_answer(service, request))
    service.scheduler.start_operation("vanilla", spec, "root", NOW)
    stamp = feed.stamp()  # no tick under way: the stamp ticks itself, and the replica has it at once
    assert stamp == process.replica.counter
    answer = process.replica.answer(request, stamp)
    assert answer is not None and b"position 1 of 3 in its queue" in answer


def test_a_template_made_while_its_operation_changed_is_not_sent(service: SchedulerService) -> None:
    """A command that changes an operation while its template is being made (the feed's thread makes it without
    the tick's lock) keeps that template from the replica: the next get is a miss, then answered as it is now."""
    tokens = _tokens(service)
    process = _attached(service, _listening(service))
    spec = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
    service.scheduler.start_operation("vanilla", spec, "root", NOW)
    op = service.scheduler.start_operation("vanilla", spec, "root", NOW)  # pending: the pool runs one
    request = _request(op.id, tokens["root"], SHAPES[0])
    process.sync()
    real = service.commands.read_map

    def changed_meanwhile(operation_id: str, parameters: Any) -> Any:
        made = real(operation_id, parameters)
        service.commands.suspend_operation(_ctx(operation_id))  # lands after the map was read
        return made

    service.commands.read_map = changed_meanwhile  # type: ignore[method-assign]
    try:
        process.get(request)  # a miss: its template is asked for, made by the next tick while it changes
    finally:
        service.commands.read_map = real  # type: ignore[method-assign]
    assert op.id not in process.replica.operations
    process.get(request)  # a miss again
    process.get(request)
    assert process.compared == 1 and process.relayed == 2


def test_the_feed_keeps_no_mark_per_changed_operation(service: SchedulerService) -> None:
    """Operations a command changed leave no mark in the feed: none while no read process listens (every service
    holds a feed), and only those changed since the last round of templates while one does. Before, the per-operation
    marks of template races grew with every operation the scheduler ever changed."""
    feed = _listening(service)
    spec = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
    started = [service.scheduler.start_operation("vanilla", spec, "root", NOW) for _ in range(20)]
    for op in started[1:]:
        service.commands.suspend_operation(_ctx(op.id))
    assert feed._epochs == {}
    process = _attached(service, feed)
    for op in started[1:]:
        service.commands.resume_operation(_ctx(op.id))
    assert len(feed._epochs) == len(started) - 1
    process.sync()
    assert feed._epochs == {}


def test_the_feed_ticks_on_its_loop_woken_from_any_thread(
    service: SchedulerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``attach`` runs the feed on a task of the calling event loop (no thread of its own): a hook from another
    thread wakes it through the loop (the idle period made far longer than the test's bound, so only a wake-up
    ticks), again after each tick; after ``detach`` nothing more is sent."""
    monkeypatch.setattr(feed_module, "IDLE_PERIOD", 60.0)
    feed = _listening(service)
    sent: list[list[dict[str, Any]]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        threads = {thread.name for thread in threading.enumerate()}
        feed.attach(sent.append)
        assert {thread.name for thread in threading.enumerate()} == threads
        deadline = loop.time() + 20
        for wakes in (1, 2):
            await asyncio.to_thread(feed.pool_trees_changed)
            while len(sent) < wakes:
                assert loop.time() < deadline, "a hook from another thread did not wake the feed"
                await asyncio.sleep(0.001)
            assert sent[-1][-1]["kind"] == wire.COUNTER
        feed.detach()
        await asyncio.to_thread(feed.pool_trees_changed)
        await asyncio.sleep(0.05)  # the loop's turns after the hook: the cancelled task sends nothing
        assert len(sent) == 2

    asyncio.run(scenario())


def test_a_shape_asked_rarely_is_not_made_ahead(
    service: SchedulerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Templates made before a get asks are made in the most asked shape, and in the next one only when it is asked
    at least ``WARM_SHAPE_SHARE`` as often: one asked once would double the work for every queued operation."""
    monkeypatch.setattr(feed_module, "WARM_EVERY", 1e-9)
    tokens = _tokens(service)
    process = _attached(service, _listening(service))
    spec = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
    ops = [service.scheduler.start_operation("vanilla", spec, "root", NOW) for _ in range(6)]
    process.sync()
    for _ in range(8):
        process.get(_request(ops[1].id, tokens["root"], SHAPES[0]))
    process.get(_request(ops[1].id, tokens["root"], SHAPES[3]))  # asked once
    process.sync()
    process.sync()  # the queue the replica now holds shows the others: made ahead
    held = process.replica.operations
    assert {op.id for op in ops[2:]} <= set(held)
    keys = {key for op in ops[2:] for key in held[op.id].templates}
    assert len(keys) == 1  # the most asked shape only
    for _ in range(4):
        process.get(_request(ops[1].id, tokens["root"], SHAPES[3]))
    newest = service.scheduler.start_operation("vanilla", spec, "root", NOW)
    process.sync()
    process.sync()
    assert len(held[newest.id].templates) == 2  # asked often enough now: both shapes made ahead


def _forecast_moves(service: SchedulerService, clock: _Clock, replica: Replica | None = None) -> _ReadProcess:
    """Pending operations read in every templated shape by every user, then again after a new forecast (a real
    refresh at a later clock: the forecast a map shows is marked by its time) and after a failed refresh; each
    answer the replica gives compared with the scheduler's."""
    tokens = _tokens(service)
    process = _attached(service, _listening(service), replica)
    spec = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
    ops = [service.scheduler.start_operation("vanilla", spec, "root", clock()) for _ in range(4)]
    pending = [op.id for op in ops if op.state == "pending"]  # the pool runs one
    assert len(pending) == 3
    requests = [_request(i, tokens[user], shape) for i in pending for user in USERS for shape in SHAPES[:4]]
    process.sync()
    # each operation's first get in a shape a miss: its template sent at the next tick
    for request in requests:
        process.get(request)
    forecasts = service.commands.forecasts
    assert forecasts is not None
    before = forecasts.latest
    assert before is not None and not set(pending) & set(before.operations)  # made before they started
    clock.now += 30
    assert forecasts.refresh() is not None, forecasts.last_error
    assert set(pending) <= set(forecasts.latest.operations)  # the new one shows them
    relayed = process.relayed
    process.sync()
    for request in requests:
        process.get(request)
    assert process.relayed == relayed, "a template did not survive the new forecast"
    forecasts.last_error = "the forecast worker died"  # what a failed refresh leaves (``refresh``)
    process.sync()
    for request in requests:
        process.get(request)
    assert process.relayed == relayed, "a template did not survive a failed refresh"
    return process


def test_a_new_forecast_keeps_the_replicas_templates(service: SchedulerService, clock: _Clock) -> None:
    """A pending operation's answer shows ``scheduling_forecast``; a new forecast voided every template the replica
    held until session 36 (remade at the warm-up's budget: 15-25 s of misses beside 1,000 nodes). The forecast is
    now a message of its own and the templates' ``scheduling_forecast`` a slot the replica fills from it: after a
    new forecast and a failed refresh every get is still answered by the replica, byte for byte the scheduler's."""
    process = _forecast_moves(service, clock)
    assert process.compared >= 2 * 3 * len(USERS) * 4
    assert process.replica.refused == 0
    assert process.feed.counts.forecasts == 3  # the first, the new one, the failed refresh


class _DeafToNewForecasts(Replica):
    """A wrong replica: it keeps the first forecast it was sent."""

    def apply(self, message: Any) -> None:
        kept = self.forecast_known
        super().apply([one for one in message if not (kept and one.get("kind") == wire.FORECAST)])


def test_a_replica_that_keeps_an_old_forecast_is_caught(service: SchedulerService, clock: _Clock) -> None:
    """The comparison can fail: a replica deaf to new forecasts answers with the forecast of before."""
    with pytest.raises(AssertionError, match=r"^\(ReadRequest\("):  # the comparison's, not a relay count's
        _forecast_moves(service, clock, _DeafToNewForecasts(clock=clock))


def test_a_new_replica_is_warm_for_the_clients_shape_before_any_get(
    service: SchedulerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool with pending operations is found without a get (``DISCOVER_EVERY``) and its operations' templates made
    ahead in ``yt.wrapper``'s shape (``CLIENT_SHAPE``) before any get was counted: the first gets are answered by the
    replica, equal to the scheduler's. Before, a queue was held only after a get of it missed, and a shape made
    ahead only once asked: a new read process began cold (``live_queue``'s first seconds of gets relayed)."""
    monkeypatch.setattr(feed_module, "WARM_EVERY", 1e-9)
    tokens = _tokens(service)
    process = _attached(service, _listening(service))
    spec = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
    ops = [service.scheduler.start_operation("vanilla", spec, "root", NOW) for _ in range(5)]
    process.sync()  # the queue found and sent whole
    process.sync()  # its operations made ahead
    for op in ops[1:]:  # the pool runs the first
        process.get(_request(op.id, tokens["alice"], SHAPES[3]))
    assert process.relayed == 0 and process.compared == 4


def test_the_replica_makes_the_templates_of_the_maps_the_scheduler_sends(
    service: SchedulerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The feed's templates cost the scheduler only the operations' maps: the encoding and the cut
    (``pending_maps.make_template``) are the read process's, when a get first asks (``wire.UnmadeTemplate``), and
    its answers equal the scheduler's in every templated shape. Before, the scheduler made every template itself
    (about half of a template's CPU on its loop, ``bench/RESULTS.md``, session 37)."""
    from pooltree.server import operations as operations_module
    from pooltree.server import pending_maps

    monkeypatch.setattr(feed_module, "WARM_EVERY", 1e-9)
    tokens = _tokens(service)
    process = _attached(service, _listening(service))
    spec = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
    ops = [service.scheduler.start_operation("vanilla", spec, "root", NOW) for _ in range(6)]
    process.sync()  # the queue found and sent whole
    asked = ({}, {"attributes": ["id", "state", "progress"]}, {"output_format": "json"})
    for op in ops[1:]:  # a scheduler's get in each shape asks the feed for its template (a replica's miss)
        for parameters in asked:
            process.feed.read(op.id, {"operation_id": op.id, **parameters})
    made_by_scheduler = 0
    real = operations_module.make_template

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal made_by_scheduler
        made_by_scheduler += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(operations_module, "make_template", counted)
    monkeypatch.setattr(pending_maps, "make_template", counted)
    with process.feed.ticking():
        batch = process.feed.tick()
    monkeypatch.setattr(operations_module, "make_template", real)
    monkeypatch.setattr(pending_maps, "make_template", real)
    templates = [one for one in batch if one["kind"] == wire.TEMPLATE]
    assert len(templates) == len(asked) * len(ops[1:]) and made_by_scheduler == 0
    assert all("map" in one and "template" not in one for one in templates)
    process.deliver(batch)
    for op in ops[1:]:
        for shape in (SHAPES[0], SHAPES[1], SHAPES[3]):
            process.get(_request(op.id, tokens["bob"], shape))
    assert process.relayed == 0 and process.compared == len(asked) * len(ops[1:])
    held = process.replica.operations[ops[1].id]
    assert not any(isinstance(template, wire.UnmadeTemplate) for template in held.templates.values())
