"""Operation commands of the HTTP API (yt-http-api.md §6): the attribute maps the ``yt`` client reads.

``OperationCommands(scheduler, clock)`` is a ``CommandProvider``: ``register_commands(registry)`` adds
``start_operation``, ``get_operation``, ``abort_operation``, ``complete_operation``, ``suspend_operation``,
``resume_operation`` and ``update_operation_parameters``; its ``listing`` (``operation_listing.py``) adds
``list_operations`` and its ``jobs`` (``job_commands.py``) the job commands. Live operations are read from
``LiveScheduler``; finished ones of earlier runs from the store.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol

from pooltree.errors import ConfigError, PooltreeError
from pooltree.forecast.attribute import live_scheduling_forecast, operation_forecast_map
from pooltree.forecast.live import count_limit_holder, submitted_operation, tree_limitation
from pooltree.forecast.run import Forecast
from pooltree.forecast.worker import ForecastService
from pooltree.server.aliases import OperationAliases
from pooltree.server.commands import CommandContext, CommandRegistry, Deferred, Encoded, output_format
from pooltree.server.files import FileService
from pooltree.server.job_commands import JobCommands
from pooltree.server.live import (
    LiveOperation,
    LiveScheduler,
    new_guid,
    no_such_operation,
)
from pooltree.server.live.alerts import explain_pending
from pooltree.server.live.start_claims import NotMarkedRetry
from pooltree.server.operation_listing import OperationListing, live_brief
from pooltree.server.operation_maps import attribute_map, effective_values, stored_attributes
from pooltree.server.operation_times import iso_time
from pooltree.server.pending_maps import (
    PLACEMENT_KEYS,
    Template,
    base_of,
    make_template,
    placements_of,
    select_attributes,
    templated,
)
from pooltree.server.pool_rules import check_pool_name
from pooltree.server.protocol import YtError, encode_structured, parameter_error
from pooltree.server.store import OperationRecord
from pooltree.server.store.base import mutation_key

BRIEF_ATTRIBUTES = (
    "id",
    "type",
    "operation_type",
    "state",
    "authenticated_user",
    "start_time",
    "finish_time",
    "brief_spec",
    "brief_progress",
    "suspended",
    "pool",
    "runtime_parameters",
)
FINISHED_CACHE_SIZE = 4096
"""Finished operations whose attribute maps (and encodings) are kept in memory, least recently read dropped."""
ENCODINGS_PER_OPERATION = 8
"""Distinct (output format, attribute list) encodings kept per operation."""
FAST_TRIES = 3
"""Times ``get_operation``'s event-loop path reads a pending operation that moved while it was read before it hands
the read to a worker thread."""
STALE_READ_PERIOD = 1.0
"""Seconds a running operation's attribute map may be behind when ``get_operation`` finds the scheduling lock busy
(heartbeats, an update): it is answered from the kept map instead of waiting, as the orchid is (YTsaurus's
``static_orchid_cache_update_period``, 1 s; its operation progress is periodic too)."""


class _Attributes:
    """An operation's attribute map as of ``fingerprint``, and its encodings per (format, attribute list).

    ``attributes`` is None when only the encodings were kept (a queued operation's map read on the event loop:
    it changes with every start into its pool, and a kept map is ~100 objects the garbage collector walks until
    it is replaced; bytes are not walked)."""

    __slots__ = ("attributes", "built", "encoded", "fingerprint", "templates")

    def __init__(self, fingerprint: Hashable, attributes: dict[str, Any] | None, built: float = 0.0) -> None:
        self.fingerprint = fingerprint
        self.attributes = attributes
        self.encoded: dict[Hashable, Encoded] = {}
        self.templates: dict[Hashable, Template] = {}
        """A pending operation's answers per encoding key with its queue numbers left out (``pending_maps.py``),
        valid while its fingerprint's base (``_base``) is this entry's."""
        self.built = built
        """When the map was built (the commands' clock): a stale one is served while the lock is busy only if
        it is at most ``STALE_READ_PERIOD`` old."""


def check_pool_names(spec: dict[str, Any], field: str) -> None:
    """YTsaurus's pool name rules for ``pool`` and ``scheduling_options_per_pool_tree/<tree>/pool``."""
    if spec.get("pool") is not None:
        check_pool_name(spec["pool"], field=f"{field}.pool")
    per_tree = spec.get("scheduling_options_per_pool_tree")
    if isinstance(per_tree, dict):
        for tree, options in per_tree.items():
            if isinstance(options, dict) and options.get("pool") is not None:
                check_pool_name(
                    options["pool"], field=f"{field}.scheduling_options_per_pool_tree.{tree}.pool"
                )


def _spec_error(error: ConfigError) -> YtError:
    """A refused spec as the YT error a start answers (the field and the reason as attributes)."""
    return YtError(
        f"Invalid operation spec: {error.message}",
        attributes={"field": error.path, "reason": error.reason},
        inner_errors=[error],
    )


class ReadHooks(Protocol):
    """What ``OperationCommands`` tells a read process's feed (``pooltree/reads/feed.py``)."""

    def read(self, operation_id: str, parameters: Mapping[str, Any]) -> None:
        """``get_operation`` of ``operation_id`` with ``parameters`` was asked here (on the event loop)."""
        ...

    def changed(self, operation_id: str) -> None:
        """A command changed ``operation_id`` (what a read process holds of it is void)."""
        ...


class OperationCommands:
    """The operation commands over a ``LiveScheduler`` (the job commands are its ``jobs``)."""

    def __init__(self, scheduler: LiveScheduler, clock: Callable[[], float]) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.aliases = OperationAliases(scheduler)
        """The spec's ``alias`` -> the operation it names (``aliases.py``)."""
        self.listing = OperationListing(scheduler, clock)
        """``list_operations`` (``operation_listing.py``)."""
        self.jobs = JobCommands(scheduler, self._operation_id)
        """``list_jobs``, ``get_job``, ``abort_job``, ``get_job_stderr`` (``job_commands.py``)."""
        self._live: dict[str, _Attributes] = {}
        self._finished: OrderedDict[str, _Attributes] = OrderedDict()
        self._cache_lock = threading.Lock()
        """Guards the finished-operations LRU against concurrent threadpool readers (the event loop only gets)."""
        self.stale_reads = 0
        """get_operation answers served from a map of a moment ago because the scheduling lock was busy."""
        self.files: FileService | None = None
        """Resolves ``file_paths`` when an operation starts (set by the service)."""
        self.forecasts: ForecastService | None = None
        """The forecast of the live cluster (``scheduling_forecast``; set by the service)."""
        self.read_feed: ReadHooks | None = None
        """A read process's feed (``pooltree/reads/feed.py``): told of ``get_operation`` reads (it sends their
        templates) and of the operations the commands change (it voids theirs); None without a read process."""

    # ------------------------------------------------------------------ cached attribute maps

    def _placement(self, op: LiveOperation) -> Hashable | None:
        """What a pending operation's placement shows (queue, position, queue length, the pool's running count) in
        each tree, read without the scheduler's lock; None if it moved while being read."""
        placement = []
        trees = self.scheduler.registry.trees
        try:
            for name in op.trees:
                tree_op = trees[name].operations.get(op.id)
                holder = None if tree_op is None else tree_op.pending_pool
                if holder is None:
                    placement.append((name, tree_op is not None and tree_op.running))
                    continue
                position = trees[name].pending_position(holder, op.id)
                placement.append(
                    (
                        name,
                        holder.name,
                        position,
                        len(holder.pending),
                        holder.running_operation_count,
                        holder.max_running_operation_count,
                    )
                )
        except (KeyError, ValueError, RuntimeError):
            return None
        return tuple(placement)

    def _fingerprint(self, op: LiveOperation) -> Hashable | None:
        """What a live operation's attribute map depends on (for a pending one also its place in the queues), or
        None when that cannot be told now."""
        last_update = self.scheduler.updates.last_update
        placement = self._placement(op) if op.state == "pending" else ()
        if placement is None:
            return None
        return (
            *op.change_mark(),
            tuple(last_update.get(tree) for tree in op.trees),
            placement,
            self._forecast_mark(),
        )

    @staticmethod
    def _base(fingerprint: Hashable) -> Hashable:
        """A pending operation's fingerprint without its queue numbers (what its templates depend on); None for
        no fingerprint."""
        if not isinstance(fingerprint, tuple):
            return None
        return (*fingerprint[:-2], base_of(fingerprint[-2]), fingerprint[-1])

    def _forecast_mark(self) -> Hashable:
        """Which forecast an attribute map shows (a new one, or a failed refresh, makes the map stale)."""
        return self.forecast_shown()[0]

    def forecast_shown(self) -> tuple[Hashable, Forecast | None, str | None]:
        """Which forecast an attribute map shows now (its mark: ``forecast_mark``), the forecast and the last
        refresh's error, read together (a read process's replica is sent the two when the mark moves)."""
        forecasts = self.forecasts
        if forecasts is None:
            return None, None, None
        latest, error = forecasts.latest, forecasts.last_error
        return (None if latest is None else latest.now, error), latest, error

    def _cached(self, operation_id: str) -> _Attributes | None:
        """The cached attribute map if it is current; never blocks (runs on the event loop, without the lock)."""
        op = self.scheduler.operations.get(operation_id)
        if op is None:
            return self._finished.get(operation_id)
        entry = self._live.get(operation_id)
        if entry is None or entry.fingerprint is None or entry.fingerprint != self._fingerprint(op):
            return None
        return entry

    def _pending_entry(self, op: LiveOperation, *, keep: bool = True) -> _Attributes | None:
        """A pending operation's map built without the scheduler's lock (a fair-share update may hold it for long
        with many operations queued); None if the operation changed while it was read (then built under the lock).
        A pending operation has no jobs, so the map is its record, its placement and the last published shares."""
        fingerprint = self._fingerprint(op)
        if fingerprint is None:
            return None
        entry = self._live.get(op.id)
        if entry is not None and entry.fingerprint == fingerprint and entry.attributes is not None:
            return entry
        try:
            attributes = self._live_attributes(op)
        except (KeyError, ValueError, RuntimeError, PooltreeError):
            return None
        if op.state != "pending" or self._fingerprint(op) != fingerprint:
            return None
        entry = _Attributes(fingerprint, attributes, self.clock())
        if keep:
            self._live[op.id] = entry
        return entry

    def _entry(self, operation_id: str) -> _Attributes:
        """The attribute map, rebuilt if anything it shows changed (live) or read once from the store (finished).

        Only live operations need the scheduler's lock (and pending ones not even that); stored ones are read
        from the store."""
        op = self.scheduler.operations.get(operation_id)
        if op is not None and op.state == "pending":
            pending = self._pending_entry(op)
            if pending is not None:
                return pending
        if op is not None:
            current = self._cached(operation_id)
            if current is not None and current.attributes is not None:
                return current
            lock = self.scheduler.lock
            if not lock.acquire(blocking=False):
                recent = self._recent(operation_id)
                if recent is not None:  # heartbeats or an update hold the lock: the map of a moment ago
                    self.stale_reads += 1
                    return recent
                lock.acquire()
            try:
                op = self.scheduler.operations.get(operation_id)
                if op is not None:
                    fingerprint = self._fingerprint(op)
                    entry = self._live.get(operation_id)
                    if (
                        entry is None
                        or fingerprint is None
                        or entry.fingerprint != fingerprint
                        or entry.attributes is None
                    ):
                        entry = _Attributes(fingerprint, self._live_attributes(op), self.clock())
                        self._live[operation_id] = entry
                        if len(self._live) > 2 * len(self.scheduler.operations) + 64:
                            for stale in [i for i in self._live if i not in self.scheduler.operations]:
                                del self._live[stale]
                    return entry
            finally:
                lock.release()
        return self._stored_entry(operation_id)

    def _recent(self, operation_id: str) -> _Attributes | None:
        """The kept map of a live operation if it was built at most ``STALE_READ_PERIOD`` ago (without the lock:
        a read while the scheduling lock is busy, as the orchid is answered)."""
        entry = self._live.get(operation_id)
        if entry is None or entry.attributes is None or self.clock() - entry.built > STALE_READ_PERIOD:
            return None
        return entry

    def _stored_entry(self, operation_id: str, record: OperationRecord | None = None) -> _Attributes:
        """A finished (or not live) operation's map: the LRU of finished maps, else ``record`` or the store."""
        with self._cache_lock:
            self._live.pop(operation_id, None)
            entry = self._finished.get(operation_id)
            if entry is not None:
                self._finished.move_to_end(operation_id)
                return entry
        if record is None:
            record = self.scheduler.store.get_operation(operation_id)
        if record is None:
            raise no_such_operation(operation_id)
        entry = _Attributes(None, self._stored_attributes(record))
        if record.state in ("completed", "failed", "aborted"):
            with self._cache_lock:
                self._finished[operation_id] = entry
                while len(self._finished) > FINISHED_CACHE_SIZE:
                    self._finished.popitem(last=False)
        return entry

    @staticmethod
    def _encoding_key(ctx: CommandContext) -> Hashable:
        wanted = ctx.list_param("attributes")
        return (
            repr(ctx.parameters.get("output_format")),
            None if wanted is None else tuple(map(str, wanted)),
        )

    def _encoded(self, entry: _Attributes, ctx: CommandContext) -> Encoded:
        """``entry`` in the requested format and attribute selection, encoded once per change."""
        wanted = ctx.list_param("attributes")
        key = self._encoding_key(ctx)
        found = entry.encoded.get(key)
        if found is None:
            assert entry.attributes is not None, "an entry without its map is only read for its encodings"
            data, content_type = encode_structured(
                # plain: JSON values with string keys (json.dumps first; a value it cannot take is normalized)
                self._select(entry.attributes, wanted),
                output_format(ctx.parameters),
                plain=True,
            )
            found = Encoded(data, content_type)
            if len(entry.encoded) < ENCODINGS_PER_OPERATION:  # never evicted: readers on other threads
                entry.encoded[key] = found
        return found

    # ------------------------------------------------------------------ attribute maps

    def _live_attributes(self, op: LiveOperation) -> dict[str, Any]:
        scheduler = self.scheduler
        now = self.clock()
        progress_jobs = scheduler.progress(op)
        scheduling_info: dict[str, Any] = {}
        for tree in op.trees:
            info: dict[str, Any] = {"pool": op.pools.get(tree)}
            shares = scheduler.operation_shares(tree, op.id)
            if shares is not None:
                info.update(shares)
                info.update(effective_values(scheduler, tree, op.id))
            placement: dict[str, Any] | None = None
            if op.id in scheduler.registry.operations and tree in scheduler.registry.trees:
                try:
                    placement = scheduler.registry.trees[tree].operation_orchid(op.id)
                except PooltreeError:
                    placement = {}
                for key in PLACEMENT_KEYS:
                    if key in placement:
                        info[key] = placement[key]
            explanation = explain_pending(scheduler, op, tree, placement)
            if explanation is not None:
                info["pending_allocations_reason"] = explanation
            scheduling_info[tree] = info
        alerts = scheduler.alerts(op)
        attributes = attribute_map(
            live_brief(op, progress_jobs, now),
            scheduler.unrecognized_spec(op),
            op.error,
            op.events,
            alerts,
            list(op.model.tasks),
            scheduling_info,
        )
        if self.forecasts is not None:
            attributes["scheduling_forecast"] = live_scheduling_forecast(
                self.forecasts.latest,
                op.id,
                op.trees,
                [scheduling_info.get(tree, {}).get("pending_allocations_reason") for tree in op.trees],
                error=self.forecasts.last_error,
                time_format=iso_time,
            )
        return attributes

    def _stored_attributes(self, record: OperationRecord) -> dict[str, Any]:
        return stored_attributes(record)

    def operation_attributes(self, operation_id: str) -> dict[str, Any]:
        """The full attribute map of one operation (live or stored); callers must not modify it (it is cached)."""
        return self._entry(operation_id).attributes

    _select = staticmethod(select_attributes)

    # ------------------------------------------------------------------ handlers

    def _operation_id(self, ctx: CommandContext) -> str:
        value = ctx.param("operation_id", None)
        if value is None and ctx.param("operation_alias", None) is not None:
            # the pipeline resolves it before authorizing (registry resolver); here only for direct calls
            self.aliases.resolve(ctx.parameters)
            value = ctx.param("operation_id", None)
        if value is None:
            raise YtError(
                "Missing required parameter 'operation_id'", attributes={"parameter": "operation_id"}
            )
        if not isinstance(value, str) or not value:
            raise parameter_error("operation_id", "expected a non-empty string")
        return value

    def start_operation(self, ctx: CommandContext) -> dict[str, Any] | Deferred:
        operation_type = ctx.str_param("operation_type")
        spec = ctx.param("spec")
        if not isinstance(spec, dict):
            raise parameter_error("spec", f"expected a map, got {type(spec).__name__}")
        check_pool_names(spec, "spec")
        dry_run = ctx.param("dry_run", False)
        if not isinstance(dry_run, bool):
            raise parameter_error("dry_run", f"expected a boolean, got {type(dry_run).__name__}")
        if dry_run:
            return self._dry_run(operation_type, spec, ctx.user)
        operation_id = new_guid()
        files = self.files.snapshot(spec) if self.files is not None else {}
        if files:
            assert self.files is not None
            self.files.register_operation(operation_id, files)
        try:
            mutation_id = ctx.param("mutation_id", None)
            key = None if mutation_id is None else mutation_key(ctx.user, str(mutation_id))
            # a start with an alias holds the aliases' lock through its commit: the alias checked free and taken
            # with the start, never by two starts; one without takes no lock but the scheduler's (its mutation id
            # claimed there), so starts share the group commit's batches
            with self.aliases.lock if "alias" in spec else contextlib.nullcontext():
                # a retry that waited here for its first start (held for that start's commit) answers it: the
                # alias is that start's now
                earlier = None if key is None else self.scheduler.commands.start_claims.answered(key)
                retry = ctx.bool_param("retry", False)
                if earlier is not None and not retry:
                    raise NotMarkedRetry(str(mutation_id))
                if earlier is not None:
                    op = earlier
                else:
                    alias = self.aliases.free(spec)
                    try:
                        op = self.scheduler.start_operation(
                            operation_type,
                            spec,
                            ctx.user,
                            self.clock(),
                            operation_id=operation_id,
                            mutation_id=key,
                            retry=retry,
                        )
                    except NotMarkedRetry:  # named by the user's id, not the stored key
                        raise NotMarkedRetry(str(mutation_id)) from None
                    if alias is not None:
                        self.aliases.taken(alias, op.id, op.start_time)
        except ConfigError as error:
            if files and self.files is not None:
                self.files.forget_operation(operation_id)
            raise _spec_error(error) from error
        except Exception:
            if files and self.files is not None:
                self.files.forget_operation(operation_id)
            raise
        if files and self.files is not None and op.id != operation_id:
            self.files.forget_operation(
                operation_id
            )  # a retried start answered the first attempt's operation
        return {"operation_id": op.id}

    def _dry_run(self, operation_type: str, spec: dict[str, Any], user: str) -> dict[str, Any] | Deferred:
        """``start_operation`` with ``dry_run=%true``: every check of a real start (the command's authorization
        ran already; files, type, spec, pools and count limits here), nothing stored or changed; answers where
        it would run, what would hold it pending now and the forecast of the cluster with it submitted now. The
        forecast computes in the forecast worker: the answer is `Deferred` (awaited on the event loop, no
        command thread held while the worker runs)."""
        if self.files is not None:
            self.files.snapshot(spec)  # a missing file refuses the start (resolved, not registered)
        operation_id = f"dry-run-{new_guid()}"
        try:
            model, controller, pools = self.scheduler.check_start(operation_type, spec, user, operation_id)
        except ConfigError as error:
            raise _spec_error(error) from error
        answer: dict[str, Any] = {"dry_run": True, "pool_trees": dict(pools)}
        holders = (count_limit_holder(self.scheduler, tree, pool) for tree, pool in pools.items())
        forecast: dict[str, Any] = {"waiting_for": next((found for found in holders if found), None)}
        answer["scheduling_forecast"] = forecast
        forecasts = self.forecasts
        if forecasts is None:
            forecast.update(state="unavailable", error="this scheduler runs no forecasts")
            return answer
        submitted = submitted_operation(
            operation_id, user, operation_type, spec, model, controller, pools, self.clock()
        )
        try:
            future = forecasts.dry_run(submitted)
        except (PooltreeError, MemoryError) as error:
            forecast.update(state="unavailable", error=str(error))
            return answer

        def finish(done: concurrent.futures.Future[Any]) -> dict[str, Any]:
            try:
                found = forecasts.collect(done)
            except (PooltreeError, MemoryError) as error:
                forecast.update(state="unavailable", error=str(error))
            else:
                forecast.update(
                    state="ready", computed_at=iso_time(found.now), horizon=found.horizon, seeds=found.seeds
                )
                forecast.update(operation_forecast_map(found.operations[operation_id], iso_time))
                limitation = tree_limitation(list(pools), found)
                if limitation is not None:
                    forecast["limitation"] = limitation
            return answer

        return Deferred(future, finish, forecasts.answer_timeout)

    def _read_forecast(self, operation_id: str) -> None:
        """A read of ``operation_id``'s forecast: keeps refreshes going, and asks for one at once if the latest
        forecast is older than the operation (read without the lock: a hint)."""
        forecasts = self.forecasts
        if forecasts is None:
            return
        forecasts.read(self.scheduler.operations.get(operation_id))

    def get_operation(self, ctx: CommandContext) -> Encoded:
        operation_id = self._operation_id(ctx)
        self._read_forecast(operation_id)
        return self._encoded(self._entry(operation_id), ctx)

    def get_operation_fast(self, ctx: CommandContext) -> Encoded | None:
        """``get_operation`` on the event loop when the cached map is current (no lock, no store, no thread), or
        when the operation is pending: its map is built without the lock (``_pending_entry``, well under a
        millisecond at 10,000 queued), and every start into its pool changes its queue length, so with starts
        coming in a queued operation's cached map is nearly always stale; built here, a read does not queue for a
        worker thread behind listings and starts. A pending operation read while a start or a fair-share update moves
        its queue (read without the lock, the read sees the change and gives up) is read again here, up to
        ``FAST_TRIES`` times: on a worker thread it would wait behind every listing queued for one (session 28's
        ``live_queue --split``: ~1% of the reads, 140-210 ms each, which made ``get_operation``'s p99)."""
        operation_id = self._operation_id(ctx)
        self._read_forecast(operation_id)
        if self.read_feed is not None:
            self.read_feed.read(operation_id, ctx.parameters)
        entry = self._cached(operation_id)
        if entry is not None:
            if entry.attributes is not None:
                return self._encoded(entry, ctx)
            found = entry.encoded.get(self._encoding_key(ctx))
            if found is not None:
                return found
        for _ in range(FAST_TRIES):
            op = self.scheduler.operations.get(operation_id)
            if op is None or op.state != "pending":
                return None
            found = self._pending_fast(op, ctx)
            if found is not None:
                return found
        return None

    def _pending_fast(self, op: LiveOperation, ctx: CommandContext) -> Encoded | None:
        """A pending operation's answer built on the event loop; None when it moved while it was read."""
        filled = self._filled(op, ctx)
        if filled is not None:
            return filled
        built = self._pending_entry(op, keep=False)
        if built is None:
            return None
        previous = self._live.get(op.id)
        key = self._encoding_key(ctx)
        # an operation read again since what its template depends on last moved (``_base``: a fair-share update,
        # a new forecast) is likely polled (a client waiting for it): its answer is made from a template
        # (``pending_maps.py``), kept for the next reads; one read once since is encoded whole (a template made
        # on every read of operations read now and then was ~a tenth of a get beside 1,000 nodes, each template
        # dropped at the next update unused)
        base = self._base(built.fingerprint)
        polled = previous is not None and base is not None and self._base(previous.fingerprint) == base
        made = self._template(op, built, ctx) if polled else None
        if made is not None:
            template, values = made
            found = Encoded(template.join(values, output_format(ctx.parameters)), template.content_type)
            built.encoded[key] = found
        else:
            found = self._encoded(built, ctx)
        # keep the encoding, not the map (see _Attributes), and the templates
        kept = _Attributes(built.fingerprint, None)
        kept.encoded = dict(built.encoded)
        if polled:
            assert previous is not None
            kept.templates = previous.templates
        if made is not None and len(kept.templates) < ENCODINGS_PER_OPERATION:
            kept.templates = {**kept.templates, key: made[0]}
        self._live[op.id] = kept
        return found

    def _template(
        self, op: LiveOperation, built: _Attributes, ctx: CommandContext
    ) -> tuple[Template, list[Any]] | None:
        """The template of ``built``'s answer to ``ctx`` and its values there, when its format is templated."""
        fmt = output_format(ctx.parameters)
        if not templated(fmt) or built.attributes is None or not isinstance(built.fingerprint, tuple):
            return None
        wanted = ctx.list_param("attributes")
        waiting = [place[0] for place in built.fingerprint[-2] if len(place) > 2]
        return make_template(
            built.attributes, op.trees, waiting, fmt, lambda marked: self._select(marked, wanted)
        )

    def read_map(
        self, operation_id: str, parameters: Mapping[str, Any]
    ) -> tuple[dict[str, Any], tuple[Any, ...], LiveOperation] | None:
        """For a read process (``pooltree/reads/feed.py``): a pending operation's map as its own get builds it,
        the placement it was built at (per tree, as ``_placement``) and the operation, for the template of its
        answer to ``get_operation`` with ``parameters`` that the read process makes of it
        (``pending_maps.read_template``); None when it is not pending, the format is not templated, or it moved
        while read (built without the lock, as ``_pending_entry``)."""
        op = self.scheduler.operations.get(operation_id)
        if op is None or op.state != "pending":
            return None
        if not templated(output_format(dict(parameters))):
            return None
        built = self._pending_entry(op, keep=False)
        if built is None or built.attributes is None or not isinstance(built.fingerprint, tuple):
            return None
        return built.attributes, built.fingerprint[-2], op

    def forecast_mark(self) -> Hashable:
        """Which forecast the attribute maps show now (a read process's replica is sent it when it moves)."""
        return self._forecast_mark()

    def _changed(self, operation_id: str) -> None:
        if self.read_feed is not None:
            self.read_feed.changed(operation_id)

    def _filled(self, op: LiveOperation, ctx: CommandContext) -> Encoded | None:
        """A pending operation's answer from its template (``pending_maps.py``) when its map changed only in its
        queue numbers since the template was made; None otherwise (then it is built whole)."""
        kept = self._live.get(op.id)
        key = self._encoding_key(ctx)
        template = kept.templates.get(key) if kept is not None else None
        if template is None:
            return None
        fingerprint = self._fingerprint(op)
        base = self._base(fingerprint)
        if base is None or base != self._base(kept.fingerprint):
            return None
        assert isinstance(fingerprint, tuple)
        trees = self.scheduler.registry.trees
        try:
            placements = placements_of(
                fingerprint[-2], lambda tree, position: trees[tree].operation_orchid(op.id, position=position)
            )
        except (KeyError, ValueError, RuntimeError, PooltreeError):
            return None
        data = template.fill(placements, output_format(ctx.parameters))
        if data is None or op.state != "pending" or self._fingerprint(op) != fingerprint:
            return None  # moved while it was read
        entry = _Attributes(fingerprint, None)
        entry.encoded[key] = found = Encoded(data, template.content_type)
        entry.templates = kept.templates
        self._live[op.id] = entry
        return found

    def _finish(self, ctx: CommandContext, final: str) -> None:
        operation_id = self._operation_id(ctx)
        error = None
        if final == "aborted":
            message = ctx.str_param("abort_message", None)
            error = {
                "code": 1,
                "message": message or "Operation aborted by user request",
                "attributes": {"user": ctx.user},
                "inner_errors": [],
            }
        self._known(operation_id)
        try:
            self.scheduler.finish_operation(operation_id, final, self.clock(), error=error)
        finally:
            self._changed(operation_id)

    def _known(self, operation_id: str) -> None:
        if operation_id not in self.scheduler.operations:
            record = self.scheduler.store.get_operation(operation_id)
            if record is None:
                raise no_such_operation(operation_id)
            raise YtError(
                f"Operation {operation_id} has already finished ({record.state})",
                attributes={"operation_id": operation_id, "state": record.state},
            )

    def abort_operation(self, ctx: CommandContext) -> None:
        self._finish(ctx, "aborted")

    def complete_operation(self, ctx: CommandContext) -> None:
        self._finish(ctx, "completed")

    def suspend_operation(self, ctx: CommandContext) -> None:
        operation_id = self._operation_id(ctx)
        self._known(operation_id)
        try:
            self.scheduler.suspend_operation(
                operation_id, self.clock(), abort_running_jobs=ctx.bool_param("abort_running_jobs", False)
            )
        finally:
            self._changed(operation_id)

    def resume_operation(self, ctx: CommandContext) -> None:
        operation_id = self._operation_id(ctx)
        self._known(operation_id)
        try:
            self.scheduler.resume_operation(operation_id, self.clock())
        finally:
            self._changed(operation_id)

    def update_operation_parameters(self, ctx: CommandContext) -> None:
        operation_id = self._operation_id(ctx)
        parameters = ctx.param("parameters")
        if isinstance(parameters, dict):
            check_pool_names(parameters, "parameters")
        self._known(operation_id)
        try:
            self.scheduler.update_operation_parameters(operation_id, parameters, self.clock())
        except ConfigError as error:
            raise YtError(
                f"Invalid operation parameters: {error.message}",
                attributes={"field": error.path, "reason": error.reason},
                inner_errors=[error],
            ) from error
        finally:
            self._changed(operation_id)

    def register_commands(self, registry: CommandRegistry) -> None:
        # the start saves its mutation id in the operation's own commit
        registry.register("start_operation", self.start_operation, is_volatile=True, saves_mutation=True)
        registry.register_resolver("operation_alias", self.aliases.resolve)
        registry.register("get_operation", self.get_operation, fast=self.get_operation_fast)
        self.listing.register_commands(registry)
        for name, handler in (
            ("abort_operation", self.abort_operation),
            ("complete_operation", self.complete_operation),
            ("suspend_operation", self.suspend_operation),
            ("resume_operation", self.resume_operation),
            ("update_operation_parameters", self.update_operation_parameters),
        ):
            registry.register(name, handler, output_type="null", is_volatile=True)
        self.jobs.register_commands(registry)
