"""A request the replica would answer but for the floor waits in the read process for the feed (``relay.py``:
``Replica.holds``, ``HOLD_MAX``): answered by the replica when the next feed message brings it up to the floor the
request came at, relayed when ``HOLD_MAX`` passes first, in order with what the client sent after it, never lost
when its client goes or a new replica comes. The relay runs in process on a real event loop with real sockets, in
front of a stand-in scheduler that stamps every answer; every wait is bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from counting_replica import CountingReplica

from pooltree.reads.relay import HOLD_MAX, Relay
from pooltree.reads.seam import NoReplica

SECRET = b"0123456789abcdef0123456789abcdef"
STAMP = 5
TIMEOUT = 20.0
"""Seconds any one wait of these tests may take (a loaded machine's), far past ``HOLD_MAX``."""
SLACK = 1.0
"""Seconds a held request's relay may come after ``HOLD_MAX`` on a loaded machine (the loop's turn, the hop)."""


class Scheduler:
    """The scheduler's internal listener, stood in: after the peer line, each request is answered ``scheduler``
    with the feed stamp ``STAMP``; the requests' heads are kept in order."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[:2]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()  # the peer line
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head.split(b"\r\n", 1)[0])
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\nx-pooltree-feed: %d\r\n\r\nscheduler" % STAMP
                )
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return await asyncio.wait_for(reader.readexactly(length), TIMEOUT)


async def until(condition: Callable[[], Any]) -> None:
    """Wait (bounded by ``TIMEOUT``) until ``condition()`` holds, giving the loop its turns."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not condition():
        assert loop.time() < deadline, "a condition did not come within the timeout"
        await asyncio.sleep(0.001)


def get(path: str) -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: front\r\n\r\n" % path.encode()


Scenario = Callable[[Relay, Scheduler, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def run(scenario: Scenario) -> None:
    """``scenario`` with a relay on a real port whose replica applied ``STAMP - 1`` and whose floor is ``STAMP``
    (an answer stamped ``STAMP`` was relayed), and a client connected to it."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        scheduler = Scheduler()
        upstream = await scheduler.start()
        relay = Relay(upstream, SECRET, loop)
        replica = CountingReplica()
        replica.apply(STAMP - 1)
        relay.install(replica)
        relay.floor = STAMP
        server = await loop.create_server(relay.protocol, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await scenario(relay, scheduler, reader, writer)
        finally:
            writer.close()
            server.close()
            assert scheduler.server is not None
            scheduler.server.close()

    asyncio.run(main())


def test_a_held_get_is_answered_by_the_replica_once_the_feed_reaches_its_floor() -> None:
    async def scenario(relay: Relay, scheduler: Scheduler, reader: Any, writer: Any) -> None:
        writer.write(get("/replica"))
        await until(lambda: relay.held)
        relay.replica.apply(STAMP)
        relay.fed()
        assert await read_answer(reader) == b"replica applied=5 floor=5"
        assert scheduler.heads == [] and relay.holds == 1 and relay.answered == 1 and not relay.held

    run(scenario)


def test_a_held_get_waits_on_while_the_feed_is_still_behind() -> None:
    async def scenario(relay: Relay, scheduler: Scheduler, reader: Any, writer: Any) -> None:
        relay.floor = STAMP + 1
        writer.write(get("/replica"))
        await until(lambda: relay.held)
        relay.replica.apply(STAMP)  # a tick, but not the one the floor names
        relay.fed()
        assert relay.held
        relay.replica.apply(STAMP + 1)
        relay.fed()
        assert await read_answer(reader) == b"replica applied=6 floor=6"

    run(scenario)


def test_a_held_get_is_relayed_after_its_bound_and_not_before() -> None:
    async def scenario(relay: Relay, scheduler: Scheduler, reader: Any, writer: Any) -> None:
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        writer.write(get("/replica"))
        await until(lambda: relay.held)
        held = next(iter(relay.held)).held
        assert held is not None
        bound = held.timer.when()  # when it was held, plus HOLD_MAX
        assert sent_at + HOLD_MAX <= bound
        assert await read_answer(reader) == b"scheduler"
        answered_at = loop.time()
        assert bound - 0.001 <= answered_at <= sent_at + HOLD_MAX + SLACK, (answered_at - sent_at, bound)
        assert scheduler.heads == [b"GET /replica HTTP/1.1"] and relay.relayed == 1 and not relay.held

    run(scenario)


def test_what_the_client_sends_after_a_held_get_is_answered_after_it() -> None:
    async def scenario(relay: Relay, scheduler: Scheduler, reader: Any, writer: Any) -> None:
        writer.write(get("/replica"))
        await until(lambda: relay.held)
        writer.write(get("/other") + get("/replica"))
        await writer.drain()
        relay.replica.apply(STAMP)
        relay.fed()
        assert await read_answer(reader) == b"replica applied=5 floor=5"
        assert await read_answer(reader) == b"scheduler"  # two requests in one read: relayed together
        assert await read_answer(reader) == b"scheduler"
        assert scheduler.heads == [b"GET /other HTTP/1.1", b"GET /replica HTTP/1.1"]

    run(scenario)


def test_what_the_replica_never_answers_is_not_held() -> None:
    async def scenario(relay: Relay, scheduler: Scheduler, reader: Any, writer: Any) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        writer.write(get("/other"))
        assert await read_answer(reader) == b"scheduler"
        assert relay.holds == 0
        assert loop.time() - began < TIMEOUT

    run(scenario)


def test_a_new_replica_relays_what_waited_for_the_old_ones_feed() -> None:
    async def scenario(relay: Relay, scheduler: Scheduler, reader: Any, writer: Any) -> None:
        writer.write(get("/replica"))
        await until(lambda: relay.held)
        relay.install(NoReplica())
        assert await read_answer(reader) == b"scheduler"
        assert not relay.held

    run(scenario)


def test_a_held_connection_that_ends_leaves_nothing_held_and_relays_nothing() -> None:
    async def scenario(relay: Relay, scheduler: Scheduler, reader: Any, writer: Any) -> None:
        writer.write(get("/replica"))
        await until(lambda: relay.held)
        client = next(iter(relay.held))
        held = client.held
        assert held is not None and client.transport is not None
        client.transport.abort()  # reset, or closed by the sweep
        await until(lambda: not relay.held)
        assert held.timer.cancelled()  # its bound passes with nothing relayed
        relay.replica.apply(STAMP)
        relay.fed()
        assert scheduler.heads == [] and relay.answered == 0 and relay.relayed == 0

    run(scenario)


@pytest.mark.parametrize("then_feed", [False, True])
def test_a_client_gone_while_held_leaves_nothing_behind(then_feed: bool) -> None:
    """Its reading paused, the relay sees the end when the request is released (answered or relayed)."""

    async def scenario(relay: Relay, scheduler: Scheduler, reader: Any, writer: Any) -> None:
        writer.write(get("/replica"))
        await until(lambda: relay.held)
        writer.close()
        if then_feed:
            relay.replica.apply(STAMP)
            relay.fed()
        await until(lambda: not relay.held and not relay.connections)
        other_reader, other_writer = await asyncio.open_connection(*writer.get_extra_info("peername"))
        other_writer.write(get("/replica"))
        if not then_feed:
            await until(lambda: relay.held)
            relay.replica.apply(STAMP)
            relay.fed()
        assert await read_answer(other_reader) == b"replica applied=5 floor=5"
        other_writer.close()

    run(scenario)
