"""The scheduler's side of the read process's replica: what it sends (``wire.py``) and when.

``ReadFeed(scheduler, commands, security, host)`` is told of ``get_operation`` reads and of the operations the
commands change (``OperationCommands.read_feed``), of finished operations (``LiveScheduler.listeners``) and of
pool tree changes (``pool_trees_changed``); ``tick()`` returns the messages that bring a replica up to now, ending
with a ``counter``, and ``stamp()`` the counter an answer written now is stamped with (the next tick's: whatever
the answer shows happened before that tick began).

What it sends, and what it costs the scheduler:

* a pending operation's map for a request shape's template the first time a get of it reaches the scheduler (a
  replica's miss, or any client's read), and ahead of gets for the queues held: built as the scheduler's own get
  builds it, without the lock (``OperationCommands.read_map``), once per operation and shape until it is void; the
  replica makes the template of it (``wire.UnmadeTemplate``: the encoding and the cut, about half of a template's
  CPU, are the read process's since session 37);
* the queues those operations wait in: whole the first time, then per tick only what was appended (or whole again
  when an operation left), and the pool's running counts; a tick reads a queue's length, head, tail and counts;
* voids: an operation a command changed (suspend, resume, parameters, abort, complete) or that finished; every
  operation when the nodes' grouping moves (``fleet_revision``: the ``no_online_node`` alert) and when the pool
  trees change. A fair-share update changes nothing of a pending operation's map but its build time (a slot), so
  updates void nothing (the equal-answer test checks it);
* the forecast the maps show, when it moves (a new forecast, a failed refresh): a template's
  ``scheduling_forecast`` is a slot the replica fills from it, so a new forecast voids no template (it voided
  every one until session 36: the replica was cold for 15-25 s after each);
* the security directory when it moves (``Directory.revision``).

Thread-safe: the hooks run on the API loop and the command threads; the feed ticks on a task of the API loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltree.reads import wire
from pooltree.security import Security
from pooltree.security.guard import access_of
from pooltree.server.knobs import seconds_override
from pooltree.server.live import LiveScheduler
from pooltree.server.operations import OperationCommands

log = logging.getLogger(__name__)

QUEUE_READ_TRIES = 3
"""Times a queue is read without the lock before it is sent as unknown (its operations relayed until read)."""
IDLE_PERIOD = 0.05
"""Seconds between ticks when nothing tells the feed to tick: what no hook or stamp announces (an operation a
heartbeat's finish activated, a queue a start moved while no answer was stamped) reaches the replica this late."""
MIN_INTERVAL = 0.002
"""Seconds at least between two ticks (what several answers and hooks announce together goes in one batch)."""
WARM_SHAPES = 2
"""Request shapes (``wire.encoding_key``) whose templates are made before a get asks: the most asked so far."""
WARM_SHAPE_SHARE = 0.25
"""A shape after the most asked one is made ahead only if asked at least this share as often as it (one asked a
few times would otherwise double the templates made ahead of every operation)."""
WARM_CATCH_UP = 5
"""``WARM_BUDGET``s at most one warm-up spends after a longer pause than ``WARM_EVERY`` (the budget is a share of
the time since the last: a feed woken only every ``IDLE_PERIOD`` keeps the same share of a core)."""
WARM_EVERY = 0.02
"""Seconds at least between two ticks that make templates before they are asked for."""
WARM_BUDGET = seconds_override(
    "POOLTREE_READ_WARM_BUDGET", 0.002, lambda value: 0 <= value <= 0.02, "[0, 0.02]"
)
"""Seconds of CPU a tick spends at most making templates before they are asked for (with ``WARM_EVERY``, at most a
tenth of a core; what was not made waits for the next such tick). ``POOLTREE_READ_WARM_BUDGET`` overrides it (0:
no template is made before a get asks; for back-to-back comparisons)."""
MAKE_SLICE = 0.001
"""Seconds of CPU the feed's task makes templates for in one turn of the loop before it gives the loop a turn (the
interpreter's switch interval: a request waits no longer behind them than behind another thread's turn). One
template per turn fell behind the starts on a busy loop (each turn of 50 clients' requests takes milliseconds)."""
MAX_SHAPES = 64
"""Distinct request shapes counted (a client asking in ever new shapes is not remembered past these)."""
CLIENT_SHAPE = {"output_format": "json"}
"""The shape of ``yt.wrapper``'s ``get_operation`` (its parameters besides the operation that make the answer):
made ahead before any get was counted, so a new read process is warm for the official client when the first gets
come (counted as asked 0 times: once clients asked other shapes, only as often as it is asked)."""
DISCOVER_EVERY = 1.0
"""Seconds at least between two looks for pools with pending operations whose queue the replica does not hold yet:
they are held from then on and their operations' templates made ahead. Without the look a queue was held only after
a get of one of its operations missed, so a new read process (or a new queue) began cold for every get."""


_UNSENT: Hashable = ("the forecast was not sent",)
"""``ReadFeed._forecast_mark`` before the replica was sent a forecast (no mark equals it)."""


@dataclass
class _Sent:
    """What the replica holds of one operation: its request shapes and the pools it waits in."""

    keys: set[str] = field(default_factory=set)
    waits: tuple[tuple[str, str], ...] = ()


@dataclass
class _SentQueue:
    """A queue as last sent: its length, head, tail and running counts."""

    length: int
    head: str | None
    tail: str | None
    running: int
    max_running: Any


@dataclass(frozen=True)
class _Made:
    """A template made outside a tick (``ReadFeed._make``), sent by the next tick unless its operation (or
    everything) was voided since it was begun (``epoch``)."""

    operation_id: str
    key: str
    epoch: tuple[int, int]
    waits: tuple[tuple[str, str], ...]
    message: dict[str, Any]


@dataclass
class FeedCounts:
    """What the feed sent (for the bench and the tests)."""

    ticks: int = 0
    templates: int = 0
    voids: int = 0
    queues_whole: int = 0
    queue_appends: int = 0
    warmed: int = 0
    forecasts: int = 0
    made: int = 0
    """Templates' maps the scheduler built (``OperationCommands.read_map``), sent or not."""
    make_cpu: float = 0.0
    """Seconds of the scheduler's CPU (its thread's) spent building them and their messages."""
    tick_cpu: float = 0.0
    """Seconds of the scheduler's CPU spent in ticks (the feed's task's and the stamps'), templates apart."""
    send_cpu: float = 0.0
    """Seconds of the scheduler's CPU spent sending the ticks (``ReadProcess.send``: the frame pickled, written)."""


class ReadFeed:
    """The scheduler's feed of a read process's replica (module docstring; ``seam.ReadFeed``)."""

    replica = "pooltree.reads.replica:Replica"
    """What the read process makes to apply this feed (``seam.make_replica``)."""

    def __init__(
        self, scheduler: LiveScheduler, commands: OperationCommands, security: Security, host: str
    ) -> None:
        self.scheduler = scheduler
        self.commands = commands
        self.security = security
        self.host = host
        self.counts = FeedCounts()
        self._lock = threading.Lock()
        self._counter = 0
        self._owed = False
        """An answer was stamped with the next counter: the next tick sends one even with nothing else."""
        self._dirty = False
        """A hook said something the replica holds changed since the last tick began."""
        self._generation = -1
        """``scheduler.generation.coarse`` when the last tick began (a stamp owes a tick when it moved since): it
        moves with every operation record (starts, finishes, activations, suspensions, parameters) and pool tree
        change, which is everything that moves a queue or a pending operation's map, and not with job records and
        the heartbeats' pending work (``value``), which move neither."""
        self._wanted: dict[tuple[str, str], dict[str, Any]] = {}
        self._voids: set[str] = set()
        self._void_all = False
        self._epoch_all = 0
        """Moved by every void of everything (a template begun before it is not sent)."""
        self._epochs: dict[str, int] = {}
        """Per operation, moved by every change a hook told of while a read process listens (a template begun
        before it is not sent); cleared as each round of templates begins (``_make``: none is being made then, so
        only changes during a template's making count) and with ``_epoch_all``'s moves, so it holds at most the
        operations changed since the last round, not every operation the scheduler ever changed."""
        self._sent: dict[str, _Sent] = {}
        self._queues: dict[tuple[str, str], _SentQueue | None] = {}
        """The queues the replica holds (None: to be sent whole)."""
        self._security_revision: int | None = None
        self._forecast_mark: Hashable = _UNSENT
        """``OperationCommands.forecast_shown``'s mark when the forecast was last sent (``_UNSENT``: not yet)."""
        self._fleet_revision: int | None = None
        self._shapes: Counter[str] = Counter()
        """Gets by request shape (``wire.encoding_key``): the most asked are made before they are asked for."""
        self._shape_parameters: dict[str, dict[str, Any]] = {}
        client_key = wire.encoding_key(CLIENT_SHAPE)
        assert client_key is not None
        self._shapes[client_key] = 0
        self._shape_parameters[client_key] = dict(CLIENT_SHAPE)
        self._last_discover = -float("inf")
        self._cold: deque[str] = deque()
        """Operations the queues the replica holds showed (whole or appended) whose templates may not be made yet."""
        self._last_warm = 0.0
        self._send: Callable[[Any], None] | None = None
        self._ticking = threading.Lock()
        """Held by a tick from its beginning until its messages are sent (the feed's task, or a stamp's)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        """The event loop the feed's task runs on (the scheduler's API loop, where ``attach`` was called)."""
        self._loop_thread: int | None = None
        self._event: asyncio.Event | None = None
        """Set to wake the feed's task (``_wake``)."""
        self._woken = False
        """A wake-up is on its way to the loop (a hook from another thread writes the loop's self-pipe once)."""
        self._task: asyncio.Task[None] | None = None

    def listen(self, subscribe: Callable[[Callable[..., None]], None] | None = None) -> None:
        """Be told of reads and changes (``OperationCommands.read_feed``), finishes (``LiveScheduler.listeners``)
        and, through ``subscribe`` (``Cypress.subscribe``), pool tree changes."""
        self.commands.read_feed = self
        self.scheduler.listeners.append(self.finished)
        if subscribe is not None:
            subscribe(self.pool_trees_changed)

    def attach(self, send: Callable[[Any], None], *, ticking: bool = True) -> None:
        """A read process listens from now on (a new, empty replica): ``send`` gets each tick's messages as one
        list. ``ticking``: the feed ticks on a task of the running event loop (the scheduler's API loop: called
        there), not on a thread of its own: every thread that wakes for the interpreter takes it from the others
        (a heartbeat loop, a command under the scheduling lock) for up to a switch interval, and the feed's many
        small turns made heartbeats wait (``bench/RESULTS.md``, session 35). False: no task, the caller calls
        ``tick``."""
        self.detach()
        self.reset()
        self._send = send
        if ticking:
            loop = asyncio.get_running_loop()
            self._loop, self._loop_thread = loop, threading.get_ident()
            self._event = asyncio.Event()
            self._woken = False
            self._task = loop.create_task(self._run(), name="read-feed")

    def detach(self) -> None:
        """The read process is gone: no more ticks (on the loop ``attach`` ran on: a tick is never under way
        there, so none is sent after this)."""
        self._send = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self._loop = self._event = None

    def _wake(self) -> None:
        """Wake the feed's task: directly on its loop, else through the loop's self-pipe (once until it runs)."""
        loop, event = self._loop, self._event
        if loop is None or event is None or self._woken:
            return
        self._woken = True
        if threading.get_ident() == self._loop_thread:
            event.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed
                loop.call_soon_threadsafe(event.set)

    async def _run(self) -> None:
        last = 0.0
        while True:
            event = self._event
            if event is None:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), IDLE_PERIOD)
            event.clear()
            self._woken = False
            pause = last + MIN_INTERVAL - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            last = time.monotonic()
            if self._send is None:
                return
            try:
                made: list[_Made] = []
                turn = time.thread_time()
                for _ in self._making(made):  # templates for a slice of CPU per turn: requests go between
                    if time.thread_time() - turn >= MAKE_SLICE:
                        await asyncio.sleep(0)
                        turn = time.thread_time()
                send = self._send
                if send is None:
                    return
                with self._ticking:
                    batch = self._tick(made)
                    if batch:
                        self._sent_by(send, batch)
                forecasts = self.commands.forecasts
                if self._sent and forecasts is not None:
                    # the replica answers gets the scheduler no longer sees: a read keeps the forecast's
                    # periodic refreshes going (``ForecastService.read``), as those gets would here
                    forecasts.read()
            except Exception:  # a tick that failed sends nothing: the replica stays behind, answers relay
                log.exception("read feed: a tick failed")

    def _sent_by(self, send: Callable[[Any], None], batch: list[dict[str, Any]]) -> None:
        """``batch`` sent (its frame pickled and written, or queued for the writer), its CPU counted."""
        began = time.thread_time()
        try:
            send(batch)
        finally:
            self.counts.send_cpu += time.thread_time() - began

    def ticking(self) -> threading.Lock:
        """The lock a tick holds until its messages are sent (a caller that ticks itself takes it too)."""
        return self._ticking

    def reset(self) -> None:
        """A new replica (a read process started again): everything is sent anew from the next tick."""
        with self._lock:
            self._wanted.clear()
            self._voids.clear()
            self._void_all = False
            self._sent.clear()
            self._queues.clear()
            self._cold.clear()
            self._last_discover = -float("inf")
            self._epoch_all += 1
            self._epochs.clear()
            self._security_revision = None
            self._forecast_mark = _UNSENT
            # the node grouping as a new replica begins: only a move after it voids what it is sent (the first
            # tick voided everything, so the templates made for it were dropped)
            self._fleet_revision = self.scheduler.alert_center.fleet_revision
            self._owed = True

    # ------------------------------------------------------------------ hooks

    def read(self, operation_id: str, parameters: Mapping[str, Any]) -> None:
        """``get_operation`` of ``operation_id`` reached the scheduler: its template is sent if it has none. Without
        a read process nothing is asked or counted (a get's shape is learnt from the gets that reach the scheduler
        while one listens)."""
        if self._send is None:
            return
        key = wire.encoding_key(parameters)
        if key is None:
            return
        if key in self._shapes or len(self._shapes) < MAX_SHAPES:
            self._shapes[key] += 1
            if key not in self._shape_parameters:
                self._shape_parameters[key] = {
                    name: value for name, value in parameters.items() if name != "operation_id"
                }
        sent = self._sent.get(operation_id)
        if sent is not None and key in sent.keys:
            return
        with self._lock:
            self._wanted[(operation_id, key)] = dict(parameters)
        self._wake()

    def changed(self, operation_id: str) -> None:
        """A command changed ``operation_id``: what the replica holds of it is void. Without a read process nothing
        is held or being made (``attach`` starts anew), so nothing is kept."""
        if self._send is None:
            return
        with self._lock:
            self._epochs[operation_id] = self._epochs.get(operation_id, 0) + 1
            if operation_id in self._sent:
                self._voids.add(operation_id)
                self._dirty = True
        self._wake()

    def finished(self, operation_id: str, state: str) -> None:
        """``LiveScheduler.listeners``: an operation finished."""
        self.changed(operation_id)

    def pool_trees_changed(self, *_: Any) -> None:
        """The pool trees changed (a Cypress listener): every template and queue is void."""
        with self._lock:
            self._void_all = True
            self._dirty = True
        self._wake()

    def stamp(self) -> int:
        """The counter an answer written now carries: the last tick's when nothing the replica holds can have moved
        since that tick began (no operation record or pool tree change: ``generation.coarse``; no hook, directory,
        forecast or node grouping change), else the next tick's (which is then owed, and woken)."""
        if not self._dirty and self._unmoved():
            return self._counter
        send = self._send
        if send is not None and self._ticking.acquire(blocking=False):
            # the tick now, without the templates asked for or made ahead (the feed's task makes those): the
            # replica has what this answer shows as soon as the pipe brings it, not after the task's next turn
            try:
                batch = self.tick(templates=False)
                if batch:
                    self._sent_by(send, batch)
                return self._counter
            except Exception:
                log.exception("read feed: a stamp's tick failed")
            finally:
                self._ticking.release()
        with self._lock:
            self._owed = True
            counter = self._counter + 1
        self._wake()
        return counter

    def _unmoved(self) -> bool:
        """Nothing that can change what the replica holds moved since the last tick began (read without the lock:
        each is one attribute; a change caught half-way is caught by the next look)."""
        return (
            self.scheduler.generation.coarse == self._generation
            and self.security.directory.revision == self._security_revision
            and self.scheduler.alert_center.fleet_revision == self._fleet_revision
            and self.commands.forecast_mark() == self._forecast_mark
        )

    # ------------------------------------------------------------------ ticks

    def tick(self, *, templates: bool = True) -> list[dict[str, Any]]:
        """The messages that bring the replica up to now, ending with their ``counter``; [] when nothing moved and
        nothing was asked since the last tick (no counter is used then: every counter ``stamp`` gives is sent).
        ``templates`` False: the templates asked for and those made ahead wait for the next tick. One tick at a
        time, its messages sent before the next begins (``ticking``)."""
        return self._tick(self._make() if templates else [])

    def _tick(self, made: list[_Made]) -> list[dict[str, Any]]:
        began = time.thread_time()
        try:
            return self._ticked(made)
        finally:
            self.counts.tick_cpu += time.thread_time() - began

    def _ticked(self, made: list[_Made]) -> list[dict[str, Any]]:
        with self._lock:
            idle = not (self._owed or self._dirty or self._voids or self._void_all or made)
            if idle and self._unmoved():
                return []
            self._counter += 1
            counter = self._counter
            self._generation = self.scheduler.generation.coarse
            self._dirty = False
            self._owed = False
            voids, self._voids = self._voids, set()
            void_all, self._void_all = self._void_all, False
        messages: list[dict[str, Any]] = []
        fleet_revision = self.scheduler.alert_center.fleet_revision
        if fleet_revision != self._fleet_revision:
            self._fleet_revision = fleet_revision
            void_all = True
        if void_all:
            if self._sent or self._queues:
                messages.append({"kind": wire.VOID, "all": True})
                self.counts.voids += 1
            self._sent.clear()
            self._queues.clear()
            self._cold.clear()
            with self._lock:
                self._epoch_all += 1
                self._epochs.clear()
        for operation_id in voids:
            if self._sent.pop(operation_id, None) is not None:
                messages.append({"kind": wire.VOID, "operation": operation_id})
                self.counts.voids += 1
        forecast_mark, forecast, error = self.commands.forecast_shown()
        if forecast_mark != self._forecast_mark:
            # a template's forecast map is a slot the replica fills from this: a new forecast voids nothing
            self._forecast_mark = forecast_mark
            forecasts = self.commands.forecasts
            parcel = None if forecasts is None else forecasts.latest_parcel
            pickled = parcel[1] if parcel is not None and parcel[0] is forecast else None
            messages.append(wire.forecast_message(forecast, error, pickled))
            self.counts.forecasts += 1
        directory = self.security.directory
        if directory.revision != self._security_revision:
            self._security_revision = directory.revision
            messages.append(
                {
                    "kind": wire.SECURITY,
                    "authentication": self.security.authentication,
                    "host": self.host,
                    "document": directory.replica_document(),
                }
            )
        for item in made:
            self._register(item, messages)
        self._discover()
        for holder in list(self._queues):
            self._queue(holder, messages)
        self.counts.ticks += 1
        messages.append({"kind": wire.COUNTER, "value": counter})
        return messages

    def _discover(self) -> None:
        """Every ``DISCOVER_EVERY`` seconds, hold the queue of every pool with pending operations (sent whole by this
        tick, its operations then made ahead by ``_warm``); read without the lock (a pool tree changed while read is
        looked at again next time)."""
        now = time.monotonic()
        if now - self._last_discover < DISCOVER_EVERY:
            return
        self._last_discover = now
        try:
            for tree_name, tree in list(self.scheduler.registry.trees.items()):
                for pool in list(tree.pools.values()):
                    if pool.pending:
                        self._queues.setdefault((tree_name, pool.name), None)
        except RuntimeError:  # changed while read (no lock)
            pass

    def _make(self) -> list[_Made]:
        """The templates asked for since the last tick and those made ahead (``_warm``), for the next tick."""
        made: list[_Made] = []
        for _ in self._making(made):
            pass
        return made

    def _making(self, out: list[_Made]) -> Iterator[None]:
        """``_make`` one template at a time: each is appended to ``out``, then a pause (the feed's task gives the
        loop a turn there)."""
        with self._lock:
            wanted, self._wanted = self._wanted, {}
            self._epochs.clear()  # no template is being made: each begun below reads its epoch after this
        for (operation_id, key), parameters in wanted.items():
            if self._make_one(operation_id, key, parameters, out):
                yield
        yield from self._warm(out)

    def _warm(self, out: list[_Made]) -> Iterator[None]:
        """Templates of the most asked request shapes for operations the held queues showed, made before a get asks
        (a first get of an operation is otherwise a miss, relayed): at most ``WARM_BUDGET`` of CPU every
        ``WARM_EVERY`` seconds, as a share of the time since the last (``WARM_CATCH_UP``), in the shapes asked
        often enough (``WARM_SHAPE_SHARE``); the templates' own CPU (the turns between them are others')."""
        if not self._cold or not self._shapes:
            return
        now = time.monotonic()
        since = now - self._last_warm
        if since < WARM_EVERY:
            return
        self._last_warm = now
        budget = WARM_BUDGET * min(since / WARM_EVERY, WARM_CATCH_UP)
        asked = self._shapes.most_common(WARM_SHAPES)
        shapes = [key for key, count in asked if count >= WARM_SHAPE_SHARE * asked[0][1]]
        spent = 0.0
        while self._cold and spent < budget:
            operation_id = self._cold.popleft()
            began = time.thread_time()
            for key in shapes:
                parameters = {**self._shape_parameters[key], "operation_id": operation_id}
                self._make_one(operation_id, key, parameters, out)
                self.counts.warmed += 1
            spent += time.thread_time() - began
            yield

    def _make_one(self, operation_id: str, key: str, parameters: dict[str, Any], out: list[_Made]) -> bool:
        """The template of ``operation_id`` for ``key`` appended to ``out`` unless sent already or not to be made;
        whether it was tried (the scheduler's CPU was spent)."""
        sent = self._sent.get(operation_id)
        if sent is not None and key in sent.keys:
            return False
        epoch = (self._epoch_all, self._epochs.get(operation_id, 0))  # before the operation is read
        began = time.thread_time()
        try:
            item = self._made(operation_id, key, parameters, epoch)
        finally:
            self.counts.made += 1
            self.counts.make_cpu += time.thread_time() - began
        if item is not None:
            out.append(item)
        return True

    def _made(
        self, operation_id: str, key: str, parameters: dict[str, Any], epoch: tuple[int, int]
    ) -> _Made | None:
        read = self.commands.read_map(operation_id, parameters)
        if read is None:
            return None
        attributes, placement, op = read
        waits = tuple((place[0], place[1]) for place in placement if len(place) > 2)
        if not waits:  # pending in no queue: nothing would tell the replica when it runs
            return None
        access = access_of(op.id, op.user, op.spec, op.runtime_parameters)
        waiting = [place[0] for place in placement if len(place) > 2]
        message = wire.map_message(
            operation_id, key, attributes, op.trees, waiting, parameters, waits, access
        )
        return _Made(operation_id, key, epoch, waits, message)

    def _register(self, item: _Made, out: list[dict[str, Any]]) -> None:
        """``item`` sent (in a tick, after its voids) unless a void since it was begun makes it stale."""
        operation_id = item.operation_id
        if item.epoch != (self._epoch_all, self._epochs.get(operation_id, 0)):
            return  # changed while it was made: the next get asks again
        sent = self._sent.get(operation_id)
        if sent is not None and item.key in sent.keys:
            return
        if sent is not None and sent.waits != item.waits:
            out.append({"kind": wire.VOID, "operation": operation_id})
            self.counts.voids += 1
            sent = None
        if sent is None:
            sent = self._sent[operation_id] = _Sent(waits=item.waits)
        sent.keys.add(item.key)
        out.append(item.message)
        self.counts.templates += 1
        for holder in item.waits:
            self._queues.setdefault(holder, None)

    def _queue(self, holder: tuple[str, str], out: list[dict[str, Any]]) -> None:
        """The queue of ``holder`` (tree, pool) if it moved since it was sent: what was appended, else whole."""
        tree_name, pool_name = holder
        for _ in range(QUEUE_READ_TRIES):
            try:
                message = self._read_queue(tree_name, pool_name)
            except (RuntimeError, StopIteration, KeyError):
                continue  # changed while read (no lock)
            if message is not None:
                out.append(message)
            return
        self._queues[holder] = None
        out.append({"kind": wire.QUEUE, "tree": tree_name, "pool": pool_name, "start": 0, "ids": None})

    def _read_queue(self, tree_name: str, pool_name: str) -> dict[str, Any] | None:
        holder = (tree_name, pool_name)
        tree = self.scheduler.registry.trees.get(tree_name)
        pool = None if tree is None else tree.pools.get(pool_name)
        if pool is None:
            del self._queues[holder]
            return {"kind": wire.QUEUE, "tree": tree_name, "pool": pool_name, "start": 0, "ids": None}
        queue = pool.pending
        now = _SentQueue(
            len(queue),
            next(iter(queue), None),
            next(reversed(queue), None),
            pool.running_operation_count,
            pool.max_running_operation_count,
        )
        last = self._queues.get(holder)
        if last == now:
            return None
        start = 0
        ids: list[str] | None = None
        if last is not None and last.length > 0 and now.length >= last.length and now.head == last.head:
            # only appends since when the operation ``appended`` places from the end is the old tail
            appended = now.length - last.length
            newest = list(itertools.islice(reversed(queue), appended + 1))
            if len(newest) == appended + 1 and newest[-1] == last.tail:
                start, ids = last.length, newest[:appended][::-1]
        if ids is None:
            ids = list(queue)
        check = (len(queue), next(iter(queue), None), next(reversed(queue), None))
        if check != (now.length, now.head, now.tail) or start + len(ids) != now.length:
            raise RuntimeError("the queue moved while read")
        self._queues[holder] = now
        self._cold.extend(ids)
        if start == 0:
            self.counts.queues_whole += 1
        else:
            self.counts.queue_appends += 1
        return {
            "kind": wire.QUEUE,
            "tree": tree_name,
            "pool": pool_name,
            "start": start,
            "ids": ids,
            "running": now.running,
            "max_running": now.max_running,
        }
