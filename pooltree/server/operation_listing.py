"""``list_operations`` of the HTTP API (yt-http-api.md §6): one page of operations with the counters of every
operation matching the filters, each listed operation's brief attributes (``BRIEF_ATTRIBUTES``, as
``get_operation`` shows them).

``OperationListing(scheduler, clock)`` is a ``CommandProvider``; ``OperationCommands`` makes one (its
``listing``). A page's operations are taken in the order kept in memory beside the store (``live/pages.py``), or
by one indexed store query when memory cannot tell; the counters come from the scheduler's in-memory counts; a
live operation is briefed from memory without the scheduling lock, a finished one from its record as kept when
first listed (slimmed; its stored body is not decoded again); each listed brief is encoded once per change. A page
of live operations only, in JSON, is answered on the event loop (``list_operations_fast``): no store, no thread.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Container, Hashable
from dataclasses import dataclass
from typing import Any

from pooltree.server.commands import CommandContext, CommandRegistry, Encoded, output_format
from pooltree.server.live import LiveOperation, LiveScheduler
from pooltree.server.live.counts import CountFilter, CountKey, count_key
from pooltree.server.live.counts import counters as counts_of
from pooltree.server.operation_times import iso_time, parse_time
from pooltree.server.protocol import encode_structured, parameter_error
from pooltree.server.store import OperationFilter, OperationRecord

ALL = 1 << 62
"""A store query limit that means every matching row."""
FRAGMENT_CACHE_SIZE = 20_000
"""Encoded briefs of listed operations kept (least recently listed dropped)."""
FINISHED_KEPT = 5_000
"""Finished operations' records kept, slimmed to what a listing reads (least recently listed dropped)."""
FINAL_STATES = ("completed", "failed", "aborted")
BRIEF_DOCUMENT = ("suspended", "trees", "progress")
"""What of a stored record's document its brief reads (``stored_brief``)."""
BUILD_TIME_MARK = "build-time-of-the-listing"
BUILD_TIME_FIELD = f'"build_time": "{BUILD_TIME_MARK}"'.encode()
"""Where a cached live brief's ``build_time`` goes (a user's string cannot hold it: its quotes would be escaped)."""

Listed = OperationRecord | LiveOperation
"""A listed operation: a live one itself (a page of live operations from memory: ``_live_page``), else its record.
A listing reads of either only what both have: id, user, state, finish time, spec, runtime parameters."""


def _filter_factors(record: OperationRecord) -> str:
    """The text ``list_operations``'s ``filter`` searches (lower case): id, user, state, type, pools and title."""
    title = record.spec.get("title") if isinstance(record.spec.get("title"), str) else ""
    pools = " ".join(count_key(record).pools)
    return f"{record.id} {record.user} {record.state} {record.type} {pools} {title}".lower()


@dataclass(frozen=True, slots=True)
class Brief:
    """What an operation's brief shows (``BRIEF_ATTRIBUTES``): read from a live operation (``live_brief``) or from
    its stored record (``stored_brief``). ``list_operations`` answers its map (``brief_attributes``);
    ``get_operation`` starts from it (``operation_maps.attribute_map``)."""

    id: str
    type: str
    state: str
    user: str
    start_time: float
    finish_time: float | None
    spec: dict[str, Any]
    runtime_parameters: dict[str, Any]
    suspended: bool
    pool: str | None
    jobs: dict[str, Any]
    build_time: float
    trees: list[str]


def live_brief(op: LiveOperation, jobs: dict[str, Any], build_time: float) -> Brief:
    """A live operation's brief with its job counts ``jobs`` (``LiveScheduler.progress``) at ``build_time``."""
    return Brief(
        op.id,
        op.type,
        op.state,
        op.user,
        op.start_time,
        op.finish_time,
        op.spec,
        op.runtime_parameters,
        op.suspended,
        next(iter(op.pools.values()), None),
        jobs,
        build_time,
        op.trees,
    )


def stored_brief(record: OperationRecord, jobs: dict[str, Any] | None = None) -> Brief:
    """A stored operation's brief: its record's values, the job counts it holds (``stored_progress``) unless
    ``jobs`` is given."""
    doc = record.document
    return Brief(
        record.id,
        record.type,
        record.state,
        record.user,
        record.start_time,
        record.finish_time,
        record.spec,
        record.runtime_parameters,
        bool(doc.get("suspended")),
        record.pool,
        stored_progress(doc) if jobs is None else jobs,
        record.finish_time or record.start_time,
        list(doc.get("trees") or []),
    )


def brief_attributes(brief: Brief) -> dict[str, Any]:
    """The ``BRIEF_ATTRIBUTES`` of an operation; ``operation_maps.attribute_map`` starts from them too."""
    spec = brief.spec
    title = spec.get("title") if isinstance(spec.get("title"), str) else None
    attributes: dict[str, Any] = {
        "id": brief.id,
        "type": brief.type,
        "operation_type": brief.type,
        "state": brief.state,
        "authenticated_user": brief.user,
        "start_time": iso_time(brief.start_time),
        "brief_spec": {"pool": brief.pool, "title": title, "pool_trees": brief.trees},
        "brief_progress": {"jobs": dict(brief.jobs), "build_time": iso_time(brief.build_time)},
        "suspended": brief.suspended,
        "pool": brief.pool,
        "runtime_parameters": {"owners": [], "acl": [], "annotations": {}, **brief.runtime_parameters},
    }
    if brief.finish_time is not None:
        attributes["finish_time"] = iso_time(brief.finish_time)
    return attributes


def stored_progress(document: dict[str, Any] | None) -> dict[str, Any]:
    """The job counts a stored record holds, every state present (``brief_progress/jobs``)."""
    jobs = dict((document or {}).get("progress") or {})
    for key in ("running", "completed", "pending", "failed", "aborted", "lost", "total"):
        jobs.setdefault(key, 0)
    return jobs


def slim(record: OperationRecord) -> OperationRecord:
    """A finished operation's record with only what the listing reads of its body (spec and runtime parameters for
    who may see it, the document's ``BRIEF_DOCUMENT``): a finished operation's record is never written again."""
    document = record.document
    return OperationRecord(
        record.id,
        record.type,
        record.state,
        record.user,
        record.pool,
        record.start_time,
        record.finish_time,
        spec=record.spec,
        runtime_parameters=record.runtime_parameters,
        document={key: document[key] for key in BRIEF_DOCUMENT if key in document},
    )


class _Held:
    """The operations a listing holds in memory (the store does not decode their bodies): the live ones and the
    finished ones kept (``OperationListing._finished``)."""

    __slots__ = ("finished", "live")

    def __init__(self, live: Container[str], finished: Container[str]) -> None:
        self.live, self.finished = live, finished

    def __contains__(self, operation_id: object) -> bool:
        return operation_id in self.live or operation_id in self.finished


class OperationListing:
    """``list_operations`` over a ``LiveScheduler``."""

    def __init__(self, scheduler: LiveScheduler, clock: Callable[[], float]) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.visible: Callable[[str, str, str, dict[str, Any], dict[str, Any]], bool] | None = None
        """``visible(user, operation_id, owner, spec, runtime_parameters)``: set by the service from
        ``pooltree.security``; ``list_operations`` shows only what it allows."""
        self._fragments: OrderedDict[tuple[str, str], tuple[Hashable, bytes, bytes | None]] = OrderedDict()
        self._fragments_lock = threading.Lock()
        """Guards ``_fragments`` and ``_finished`` against concurrent threadpool readers."""
        self._finished: OrderedDict[str, OperationRecord] = OrderedDict()
        """Finished operations' records as listed (``slim``), so a page does not decode their bodies again; one
        whose row's state or finish time differs is read anew."""

    def register_commands(self, registry: CommandRegistry) -> None:
        # a page costs the event loop several get_operation answers: those waiting go first
        registry.register(
            "list_operations", self.list_operations_encoded, fast=self.list_operations_fast, fast_yields=True
        )

    def list_operations(self, ctx: CommandContext) -> dict[str, Any]:
        """One page of operations with the counters (see ``_listing``)."""
        page, incomplete, counters, now = self._listing(ctx)
        items = [self._brief(record, now) for record in page]
        return {"operations": items, "incomplete": incomplete, **counters}

    def list_operations_encoded(self, ctx: CommandContext) -> Encoded:
        """``list_operations`` as the command answers it, byte for byte what ``encode_structured`` makes of
        ``list_operations``'s map: each listed operation's brief is encoded once per change (``_fragment``) and the
        page is joined from those (a page of 100 is ~70 kB of JSON; encoding it whole took much of a listing's
        CPU and held the GIL in one C call); the rest is built from plain values (``plain=True``)."""
        fmt = output_format(ctx.parameters)
        if fmt.name != "json" or fmt.attributes.get("format") == "pretty":
            data, content_type = encode_structured(self.list_operations(ctx), fmt, plain=True)
            return Encoded(data, content_type)
        listing = self._listing(ctx)
        assert listing is not None  # blocking: always answered
        return self._joined(ctx, fmt, *listing)

    def list_operations_fast(self, ctx: CommandContext) -> Encoded | None:
        """``list_operations_encoded``'s answer on the event loop when its page is all in memory (the page's order
        from ``counts.pages``, every operation on it live): no store query and no worker thread. None otherwise
        (the command goes to a read thread). On a thread a listing waited for one of the
        two read threads, not for its own work (session 28's ``live_queue --split``: 208 of its 216 ms at the
        median beside 1,000 nodes), and each thread was held until the event loop took its answer back."""
        fmt = output_format(ctx.parameters)
        if fmt.name != "json" or fmt.attributes.get("format") == "pretty":
            return None
        listing = self._listing(ctx, blocking=False)
        return None if listing is None else self._joined(ctx, fmt, *listing)

    def _joined(
        self,
        ctx: CommandContext,
        fmt: Any,
        page: list[Listed],
        incomplete: bool,
        counters: dict[str, Any],
        now: float,
    ) -> Encoded:
        """The JSON answer joined from the listed operations' kept fragments."""
        fmt_key = repr(ctx.parameters.get("output_format"))
        now_text = f'"build_time": "{iso_time(now)}"'.encode()
        parts = [b'{"operations": [']
        for index, fragment in enumerate(self._fragments_of(page, now, fmt, fmt_key)):
            if index:
                parts.append(b", ")
            parts.append(fragment[0])
            if fragment[1] is not None:  # a live brief: the listing's time between its two parts
                parts += (now_text, fragment[1])
        rest, content_type = encode_structured({"incomplete": incomplete, **counters}, fmt, plain=True)
        parts += (b"], ", rest[1:])
        return Encoded(b"".join(parts), content_type)

    def _fragments_of(
        self, page: list[Listed], now: float, fmt: Any, fmt_key: str
    ) -> list[tuple[bytes, bytes | None]]:
        """The listed operations' briefs, encoded: a finished one's whole (None), a live one's in two parts
        around its ``build_time`` (the listing's time, put in when joined). Each is kept while what it shows is
        unchanged (``_fragment_key``); the kept ones are looked up under one hold of the lock per page."""
        keys = [self._fragment_key(item) for item in page]
        with self._fragments_lock:
            kept = [self._fragments.get((item.id, fmt_key)) for item in page]
        fragments: list[tuple[bytes, bytes | None]] = []
        for item, key, found in zip(page, keys, kept, strict=True):
            if key is None:
                fragments.append((encode_structured(self._brief(item, now), fmt, plain=True)[0], None))
                continue
            if found is None or found[0] != key:
                found = self._keep_fragment(item, key, now, fmt, fmt_key)
            fragments.append(found[1:])
        return fragments

    def _fragment_key(self, item: Listed) -> Hashable | None:
        """What a listed operation's brief shows: a live operation's revision, state, suspension and job counts
        (its change mark and running count: ``views.progress`` reads only those counters, so no progress map is
        built per listed operation), a finished one's state; None when it cannot be told now (not kept)."""
        op = item if isinstance(item, LiveOperation) else self.scheduler.operations.get(item.id)
        if op is not None:
            try:
                return (op.change_mark(), op.running_job_count)
            except RuntimeError:  # its reservations changed while counted: not cached
                return None
        if item.state in FINAL_STATES:
            return ("final", item.state, item.finish_time)
        return None

    def _keep_fragment(
        self, item: Listed, key: Hashable, now: float, fmt: Any, fmt_key: str
    ) -> tuple[Hashable, bytes, bytes | None]:
        """``item``'s brief encoded and kept under ``key`` (a live one split at its ``build_time``)."""
        brief = self._brief(item, now)
        live = isinstance(key, tuple) and key[0] != "final"
        if live:
            brief["brief_progress"]["build_time"] = BUILD_TIME_MARK
        data = encode_structured(brief, fmt, plain=True)[0]
        if live:
            head, _, tail = data.partition(BUILD_TIME_FIELD)
            found: tuple[Hashable, bytes, bytes | None] = (key, head, tail)
        else:
            found = (key, data, None)
        with self._fragments_lock:
            self._fragments[(item.id, fmt_key)] = found
            self._fragments.move_to_end((item.id, fmt_key))
            while len(self._fragments) > FRAGMENT_CACHE_SIZE:
                self._fragments.popitem(last=False)
        return found

    def _live(self, item: Listed) -> LiveOperation | None:
        """The live operation ``item`` is (or whose record it is), None when it is not live (any more)."""
        if isinstance(item, LiveOperation):
            return item
        return self.scheduler.operations.get(item.id)

    def _listing(
        self, ctx: CommandContext, *, blocking: bool = True
    ) -> tuple[list[Listed], bool, dict[str, Any], float] | None:
        """One page of operations (newest first; ``cursor_time`` / ``cursor_direction`` page on) with the counters
        of every operation matching the filters; not ``blocking`` (on the event loop), None when the page is not
        all in memory (its ids from ``_memory_ids``, its operations live: ``_live_page``).

        The page is taken in memory's order (``counts.pages``) or by one indexed store query of ``limit + 1``
        rows; the counters come from the in-memory counts
        (``LiveScheduler.counts``), so a call costs the page, not the number of operations. Time bounds
        (``from_time``/``to_time``), ``filter`` text and ``with_failed_jobs`` are not columns of the index: with
        them the matching rows are read and counted (the cost grows with how many match)."""
        limit = ctx.int_param("limit", 100)
        if limit < 0 or limit > 1000:
            raise parameter_error("limit", "must be between 0 and 1000")
        direction = ctx.str_param("cursor_direction", "past")
        if direction not in ("past", "future"):
            raise parameter_error("cursor_direction", "expected past or future")
        filters = {name: ctx.str_param(name, None) for name in ("state", "user", "pool", "type")}
        text = ctx.str_param("filter", None)
        with_failed_jobs = ctx.param("with_failed_jobs", None)
        if with_failed_jobs is not None and not isinstance(with_failed_jobs, bool):
            with_failed_jobs = ctx.bool_param("with_failed_jobs", False)
        from_time = parse_time(ctx.param("from_time", None), "from_time")
        to_time = parse_time(ctx.param("to_time", None), "to_time")
        cursor_time = parse_time(ctx.param("cursor_time", None), "cursor_time")
        count_filter = CountFilter(
            state=filters["state"],
            user=filters["user"],
            pool=filters["pool"],
            type=filters["type"],
            with_failed_jobs=with_failed_jobs,
        )
        if from_time is None and to_time is None and not text and with_failed_jobs is None:
            query = OperationFilter(
                state=filters["state"],
                user=filters["user"],
                pool=filters["pool"],
                type=filters["type"],
                cursor_time=cursor_time,
                cursor_direction=direction,
                limit=limit + 1,
            )
            ids = self._memory_ids(query)
            page: list[Listed] | None = None if ids is None else self._live_page(ids, None)
            if page is None:
                if not blocking:
                    return None
                page = self._stored_page(query, ids)
            counters = self.scheduler.counts.counters(count_filter)
        elif not blocking:
            return None
        else:
            scanned, counters = self._scan(
                count_filter, text, from_time, to_time, cursor_time, direction, limit
            )
            page = [self._whole(record) for record in scanned]
        now = self.clock()
        listed = [
            record
            for record in page[:limit]
            # the user may not read it (pooltree.security); counters still count it
            if self.visible is None
            or self.visible(ctx.user, record.id, record.user, record.spec, record.runtime_parameters)
        ]
        return listed, len(page) > limit, counters, now

    def _memory_ids(self, query: OperationFilter) -> list[str] | None:
        """The ids of ``query``'s page in the store's order from memory (``counts.pages``), on a store that orders
        ids as Python does (``Store.code_point_ids``); None when memory cannot tell."""
        if not self.scheduler.store.code_point_ids:
            return None
        return self.scheduler.counts.pages.ids(query)

    def _stored_page(self, query: OperationFilter, ids: list[str] | None) -> list[Listed]:
        """The page of ``query`` read from the store, whole (``_whole``): its ids known from memory (``ids``), or
        asked first (a page of live operations is then made from memory: ``_live_page``)."""
        store = self.scheduler.store
        page = (
            None
            if ids is not None
            else self._live_page(store.list_operation_ids(query), query.cursor_direction)
        )
        if page is None:
            records = store.list_operations(
                query,
                # live ones are briefed from memory and finished ones listed before from their kept records:
                # their bodies are not decoded
                known=_Held(self.scheduler.operations, self._finished),
            )
            return [self._whole(record) for record in records]
        return page

    def _live_page(self, ids: list[str], direction: str | None) -> list[Listed] | None:
        """A page whose operations are all live: the live operations themselves, in the store's order (``ids``);
        None when one is not live (then the store lists the page's rows), or when ``ids`` read from the store are
        not in the page's ``direction`` (None: ``ids`` from memory's order, the operations' own start times).
        What a listing reads of a live operation's row is its id and user (its brief is its live state), so the
        rows are not read (per page, a hundred rows the store steps one by one, letting the GIL go at each), nor
        made into records (a third of a page's cost on the event loop)."""
        operations = self.scheduler.operations
        page: list[Listed] = []
        for operation_id in ids:
            op = operations.get(operation_id)
            if op is None:
                return None
            page.append(op)
        if direction is not None:
            keys = [(op.start_time, op.id) for op in page]
            if keys != sorted(keys, reverse=direction == "past"):
                return None
        return page

    def _whole(self, record: OperationRecord) -> OperationRecord:
        """A listed record as the listing needs it: a live operation's from memory, a finished one's as kept (or
        read, and kept), one that was live when listed but finished since read whole (its body was not decoded)."""
        op = self.scheduler.operations.get(record.id)
        if op is not None:
            if record.partial:
                record.spec, record.runtime_parameters = op.spec, op.runtime_parameters
            return record
        if record.partial:
            with self._fragments_lock:
                kept = self._finished.get(record.id)
                if kept is not None:
                    self._finished.move_to_end(record.id)
            if kept is not None and (kept.state, kept.finish_time) == (record.state, record.finish_time):
                return kept
            record = self.scheduler.store.get_operation(record.id) or record
        if record.state in FINAL_STATES and not record.partial:
            kept = slim(record)
            with self._fragments_lock:
                self._finished[record.id] = kept
                self._finished.move_to_end(record.id)
                while len(self._finished) > FINISHED_KEPT:
                    self._finished.popitem(last=False)
            return kept
        return record

    def _brief(self, item: Listed, now: float) -> dict[str, Any]:
        """A listed operation's brief attributes (``BRIEF_ATTRIBUTES``, as ``get_operation`` shows them): a live
        operation's current state and progress, read without the scheduler's lock; else the stored record's."""
        op = self._live(item)
        if op is None:
            assert isinstance(item, OperationRecord)  # a live one listed is itself (``_live``)
            return brief_attributes(stored_brief(item))
        try:
            jobs = self.scheduler.progress(op)
        except RuntimeError:
            # its jobs changed while counted: the progress the store has (none kept in memory)
            jobs = stored_progress(item.document if isinstance(item, OperationRecord) else None)
        return brief_attributes(live_brief(op, jobs, now))

    def _scan(
        self,
        count_filter: CountFilter,
        text: str | None,
        from_time: float | None,
        to_time: float | None,
        cursor_time: float | None,
        direction: str,
        limit: int,
    ) -> tuple[list[OperationRecord], dict[str, Any]]:
        """Filters the index cannot answer: read the operations in the time range, count and page them here."""
        records = self.scheduler.store.list_operations(
            OperationFilter(from_time=from_time, to_time=to_time, cursor_direction=direction, limit=ALL)
        )
        if text:
            needle = text.lower()
            records = [r for r in records if needle in _filter_factors(r)]
        groups: Counter[CountKey] = Counter(count_key(r) for r in records)
        counters = counts_of(groups.items(), count_filter)
        page = []
        for record in records:
            if cursor_time is not None and (
                record.start_time >= cursor_time if direction == "past" else record.start_time <= cursor_time
            ):
                continue
            key = count_key(record)
            if (
                (count_filter.state is not None and key.state != count_filter.state)
                or (count_filter.user is not None and key.user != count_filter.user)
                or (count_filter.pool is not None and count_filter.pool not in key.pools)
                or (count_filter.type is not None and key.type != count_filter.type)
                or (
                    count_filter.with_failed_jobs is not None
                    and key.has_failed_jobs != count_filter.with_failed_jobs
                )
            ):
                continue
            page.append(record)
            if len(page) > limit:
                break
        return page, counters
