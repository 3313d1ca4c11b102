"""One node heartbeat in flight on an event loop: the scheduler's heartbeat handler without its transport, as a
chain of callbacks on the loop rather than nested coroutines.

``SchedulerService`` answers heartbeats from two transports with it: the ASGI route (the API's port, and what the
heartbeat listener's protocol hands to uvicorn) authenticates, reads the body, makes a flight and awaits its
answer; the heartbeat listener's protocol hands plain heartbeats past ASGI (``SchedulerService.direct_heartbeat``,
``heartbeat_protocol.DirectHeartbeats``), which authenticates and makes a flight whose answer the protocol writes.
The same authentication, errors, throttling, wait for the store, tracing and scheduling either way.

Why callbacks: at a loaded young collection of the collector, each heartbeat in flight held ~60 objects that die
after it (the task and nine coroutines from the protocol's ``_answer`` down to ``GroupCommit.wait_async``, the ASGI
scope, header tuples, futures, closures' cells), and since an object allocated before a collection and freed
after it gives nothing back to the count that sets the next one off, the next came early: 18-21 young collections
a second at 1,000 loaded nodes (``bench/RESULTS.md``, session 37, ``startcost4``). A flight is one object with
slots; what it waits on is a future of the loop whose callback is one of its bound methods.

A flight: ``begin(body, ...)`` decodes the heartbeat (a YT error naming the field when it is malformed), counts it
in flight (``live/throttle.py``: throttled when over a limit, the overload alert and metrics), binds the node to
its host and tries the scheduling lock on the loop. When the lock is busy it waits for the lock's release
(``lock.released``: a future of the loop) and tries again; a heartbeat that would publish a stale tree first is
answered on a heartbeat thread (``SchedulerService.answer_heartbeat``, which waits for its records there), and
one whose reports made a tree stale (``DeferredHeartbeat``) is finished on one; either way an executor future's
callback brings it back. Its job records' ticket is then waited for a step at a time (``GroupCommit.wait_step``,
the steps ``wait_async`` awaits; each step's future calls the flight back: no coroutine, no task): the answer is given only once the batch holding its records
is durable (acknowledged means stored). Then the heartbeat leaves the throttle's count, its answer is encoded,
its phases recorded (``live/tail.py``, ``heartbeat_trace.py``) and given to ``answered``: the answer's body (200)
or, for any error on the way, the error's ``Response`` (a ``PooltreeError`` as its YT error, anything else as an
internal error, logged), once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from starlette.responses import Response

from pooltree.errors import PooltreeError
from pooltree.node import wire
from pooltree.node.wire import HeartbeatRequest
from pooltree.security import Security
from pooltree.server.app import new_request_id
from pooltree.server.gc_tuning import GC
from pooltree.server.heartbeat_protocol import RawHeaders, hostname_of
from pooltree.server.heartbeat_trace import TRACE, SpanCpu
from pooltree.server.heartbeats import RunningReports, decode_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.live.jobs import DeferredHeartbeat
from pooltree.server.live.tail import HeartbeatTail, PhaseClock
from pooltree.server.store import Store

log = logging.getLogger(__name__)

Answered = Callable[[bytes | Response], None]
"""Takes a flight's answer: its body (200, JSON) or an error's ``Response``."""
Attempt = tuple[dict[str, Any], int]
"""A processed heartbeat: (its response, the group commit ticket of its job records; 0: nothing to store)."""


class HeartbeatService(Protocol):
    """What a flight needs of ``SchedulerService``."""

    scheduler: LiveScheduler
    store: Store
    security: Security
    tail: HeartbeatTail
    clock: Callable[[], float]

    @property
    def heartbeat_threads(self) -> ThreadPoolExecutor | None: ...

    def enter_heartbeat(self, heartbeat: HeartbeatRequest, queued: float = 0.0) -> str | None: ...

    def leave_heartbeat(self) -> None: ...

    def answer_heartbeat(
        self, heartbeat: HeartbeatRequest, peer: str | None, throttled: bool, hostname: str | None = None
    ) -> dict[str, Any]: ...

    def name_shard(self, response: dict[str, Any], address: str, hostname: str | None) -> None: ...

    def heartbeat_error(self, error: BaseException, request_id: str) -> Response: ...


class HeartbeatFlight:
    """One heartbeat from its arrival to its answer (see the module docstring). ``arrived``: the loop's time when
    its request arrived (``http_protocol.ARRIVED``; None: unknown), ``arrived_cpu``: the CPU clocks then (the
    trace's), ``answered``: what takes its answer."""

    __slots__ = (
        "answered",
        "began",
        "clock",
        "ended_at",
        "entered",
        "heartbeat",
        "hostname",
        "loop",
        "paused",
        "peer",
        "response",
        "service",
        "span",
        "throttled",
        "ticket",
    )

    def __init__(
        self,
        service: HeartbeatService,
        peer: str | None,
        arrived: float | None,
        arrived_cpu: SpanCpu | None,
        answered: Answered,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.service = service
        self.peer = peer
        self.loop = loop
        self.answered: Answered | None = answered
        """None once answered."""
        self.clock = PhaseClock(loop.time() - arrived if arrived is not None else 0.0)
        """Its phases; ``queued``: how long it waited for its handler, the loop's backlog."""
        self.paused = GC.paused_seconds
        self.span: SpanCpu | None = (arrived_cpu or SpanCpu()) if TRACE.enabled else None
        self.heartbeat: HeartbeatRequest | None = None
        self.throttled = False
        self.entered = False
        """Counted in flight by the throttle (``leave_heartbeat`` owed)."""
        self.hostname: str | None = None
        """The host the node reached the scheduler at, when its answer names a listener or a shard."""
        self.began = 0.0
        """``time.perf_counter()`` when it was first tried (the ``heartbeat`` duration's start)."""
        self.response: dict[str, Any] | None = None
        """Its response while its records are stored."""
        self.ticket = 0
        """The group commit ticket of its job records (0: nothing to store)."""
        self.ended_at: float | None = None
        """When the last batch it waited for ended (``time.perf_counter``; None: stored before it waited)."""

    # ------------------------------------------------------------------ the steps

    def begin(
        self,
        body: bytes,
        reports: RunningReports,
        names: bool,
        headers: RawHeaders,
        server: tuple[str, int] | None,
    ) -> None:
        """An authenticated heartbeat's whole ``body``: decoded with ``reports`` (the loop's), then processed.
        ``names``: the answer names a listener or a shard (the Host of ``headers``, else ``server``, is parsed)."""
        service = self.service
        try:
            heartbeat = self.heartbeat = decode_heartbeat(body, reports)
            self.throttled = service.enter_heartbeat(heartbeat, self.clock.queued) is not None
            self.entered = True  # counted in flight from here
            self.hostname = hostname_of(headers, server) if names else None
            self.clock.mark_decoded()
            threads = service.heartbeat_threads
            if threads is None:  # not started (a test client of the app): a thread of the loop's executor
                self._on_thread(None, service.answer_heartbeat)
                return
            service.store.check_writable()
            service.security.bind_node(heartbeat.address, self.peer)
            self.began = time.perf_counter()
            self._try()
        except Exception as error:
            self.fail(error)

    def _try(self) -> None:
        """The heartbeat processed here when the scheduling lock is free (its work is a fraction of a millisecond;
        a hop to a thread and back cost about as much); else on with the lock's release (``live/lock.py``). One
        that would first publish a stale tree (a fair-share pass) goes on a heartbeat thread."""
        service, clock = self.service, self.clock
        scheduler, heartbeat = service.scheduler, self.heartbeat
        assert heartbeat is not None
        while True:
            clock.mark_try()
            if scheduler.publishing:  # the publish, the heartbeat and its commit on a heartbeat thread
                self._on_thread(service.heartbeat_threads, service.answer_heartbeat)
                return
            attempt = scheduler.try_process_heartbeat(heartbeat, service.clock(), throttled=self.throttled)
            if attempt is not None:
                break
            released = scheduler.lock.released(self.loop)
            clock.mark_try()
            attempt = scheduler.try_process_heartbeat(heartbeat, service.clock(), throttled=self.throttled)
            if attempt is not None:
                break
            if not scheduler.publishing:  # else: to a heartbeat thread, at the top
                released.add_done_callback(self._released)
                return
        if isinstance(attempt, DeferredHeartbeat):
            # its reports made a tree stale: published computed apart, then scheduled, on a heartbeat thread
            future = self.loop.run_in_executor(service.heartbeat_threads, attempt.finish)
            future.add_done_callback(self._finished)
            return
        self._processed(attempt)

    def _released(self, _released: asyncio.Future[None]) -> None:
        try:
            self._try()
        except Exception as error:
            self.fail(error)

    def _on_thread(self, threads: ThreadPoolExecutor | None, answer: Callable[..., dict[str, Any]]) -> None:
        """``answer`` (``answer_heartbeat``: processed, named, its records stored) on a thread of ``threads``."""
        future = self.loop.run_in_executor(
            threads, answer, self.heartbeat, self.peer, self.throttled, self.hostname
        )
        future.add_done_callback(self._answered_on_thread)

    def _answered_on_thread(self, future: asyncio.Future[dict[str, Any]]) -> None:
        try:
            response = future.result()
            self.clock.mark_processed()
        except Exception as error:
            self.fail(error)
            return
        self._answer(response)

    def _finished(self, future: asyncio.Future[Attempt]) -> None:
        """A ``DeferredHeartbeat`` finished on a heartbeat thread."""
        try:
            self._processed(future.result())
        except Exception as error:
            self.fail(error)

    def _processed(self, attempt: Attempt) -> None:
        """Processed under the lock: its records' batch waited for (stepped here, no task), then answered."""
        self.response, ticket = attempt
        self.clock.mark_processed()
        if ticket <= 0:
            self._stored(None)
            return
        self.ticket = ticket
        self._wait_stored()

    def _wait_stored(self, ended: asyncio.Future[float] | None = None) -> None:
        """Its ticket waited for a step at a time (``GroupCommit.wait_step``, as ``wait_async`` awaits it): on with
        the future of the next batch's end (whose callback this is), or, once its records are durable, the
        answer."""
        try:
            if ended is not None:
                self.ended_at = ended.result()
            waited = self.service.scheduler.commits.wait_step(self.ticket, self.loop)
        except (Exception, asyncio.CancelledError) as error:  # its batch failed; its loop is closing
            self.service.scheduler.record_duration("heartbeat", time.perf_counter() - self.began)
            self.fail(error)
            return
        if waited is not None:
            waited.add_done_callback(self._wait_stored)
            return
        self._stored(self.ended_at)

    def _stored(self, ended: float | None) -> None:
        """Its records are durable (the batch that stored them ended at ``ended``; None: before the wait)."""
        service, heartbeat = self.service, self.heartbeat
        assert heartbeat is not None
        response, self.response = self.response, None
        try:
            self.clock.mark_committed(ended)
            service.scheduler.record_duration("heartbeat", time.perf_counter() - self.began)
            assert response is not None
            service.name_shard(response, heartbeat.address, self.hostname)
        except Exception as error:
            self.fail(error)
            return
        self._answer(response)

    def _answer(self, response: dict[str, Any]) -> None:
        """The answer: out of the throttle's count, encoded, its phases recorded, given."""
        heartbeat = self.heartbeat
        assert heartbeat is not None
        try:
            self._leave()
            answer = wire.encode(response)
            phases, gc_seconds = self.clock.phases(), GC.paused_seconds - self.paused
            self.service.tail.record(heartbeat.address, phases, gc_seconds)
            if self.span is not None:
                TRACE.heartbeat(heartbeat.address, phases, gc_seconds, self.span)
        except Exception as error:
            self.fail(error)
            return
        self._give(answer)

    # ------------------------------------------------------------------ errors and the answer

    def fail(self, error: BaseException) -> None:
        """``error`` answered as the heartbeat route answers it (the heartbeat out of the throttle's count)."""
        self._leave()
        request_id = new_request_id()
        if not isinstance(error, PooltreeError):
            log.error("node heartbeat failed unexpectedly (request %s)", request_id, exc_info=error)
        self._give(self.service.heartbeat_error(error, request_id))

    def _leave(self) -> None:
        if self.entered:
            self.entered = False
            self.service.leave_heartbeat()

    def _give(self, result: bytes | Response) -> None:
        answered, self.answered = self.answered, None
        if answered is not None:
            answered(result)
