"""The order of ``list_operations``'s pages, kept in memory beside the store: which operations a page lists,
without a query.

A page lists the newest (``past``) or oldest (``future``) ``limit + 1`` operations matching the index's columns
(state, user, pool, type) on the far side of a cursor time, ordered by (start time, id) as the store orders them
(``store.base.operation_page_sql``). ``PageOrder`` follows the same records as the counters
(``counts.OperationCounts``: loaded once from the store, then every record the scheduler writes), with each
operation's columns as its row holds them, so ``ids`` gives the store's answer for those pages it can answer.

Bounded: every operation that may still be written is kept, finished ones only up to ``FINISHED_KEPT`` (the
newest by start time); those dropped lie at or below ``horizon``, and a page that would reach below it is not
answered here (``ids`` is None: ask the store). A started operation whose first record is not stored yet (the
group commit: ``LivePersistence.queue_start``) is not listed until it is (``stored``), as the store would not.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import dataclass

from pooltree.server.store import OperationFilter, OperationRecord

FINISHED_KEPT = 100_000
"""Finished operations kept in the order (the newest by start time); older ones are read from the store."""
WALK_LIMIT = 20_000
"""Operations a page looks at before it leaves the page to the store (a filter few operations pass)."""


@dataclass(slots=True)
class _Row:
    """An operation's columns as the store has them (what a page filters on)."""

    start_time: float
    state: str
    user: str
    pool: str | None
    type: str
    final: bool
    stored: bool


def _row(record: OperationRecord, *, final: bool, stored: bool) -> _Row:
    return _Row(float(record.start_time), record.state, record.user, record.pool, record.type, final, stored)


class PageOrder:
    """Operations by (start time, id) with their filter columns; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._order: list[tuple[float, str]] = []
        self._rows: dict[str, _Row] = {}
        self._finished = 0
        self.horizon = -math.inf
        """Every operation started after this time is in the order (operations at or before it may not be)."""

    def load(self, records: Iterable[OperationRecord], *, final_states: Iterable[str] = ()) -> None:
        """Every stored operation (replacing what was kept); those in ``final_states`` will not be written again."""
        final = frozenset(final_states)
        rows = {record.id: _row(record, final=record.state in final, stored=True) for record in records}
        with self._lock:
            self._rows = rows
            self._order = sorted((row.start_time, operation_id) for operation_id, row in rows.items())
            self._finished = sum(1 for row in rows.values() if row.final)
            self.horizon = -math.inf
            self._trim()

    def put(self, record: OperationRecord, *, final: bool = False, stored: bool = True) -> None:
        """An operation's record was written (``final``: it will not be written again; ``stored`` False: queued,
        listed once ``stored`` is called)."""
        row = _row(record, final=final, stored=stored)
        with self._lock:
            old = self._rows.get(record.id)
            if old is not None:
                if old.stored and not stored:
                    row.stored = True  # a later record of a listed operation: it stays listed
                self._finished -= old.final
                if old.start_time != row.start_time:
                    self._order.pop(bisect_left(self._order, (old.start_time, record.id)))
                    insort(self._order, (row.start_time, record.id))
            elif row.start_time > self.horizon:
                insort(self._order, (row.start_time, record.id))
            else:
                return  # below the horizon: pages that reach it ask the store
            self._rows[record.id] = row
            self._finished += row.final
            self._trim()

    def stored(self, operation_id: str) -> None:
        """The queued first record of ``operation_id`` is stored: list it."""
        with self._lock:
            row = self._rows.get(operation_id)
            if row is not None:
                row.stored = True

    def forget(self, operation_id: str) -> None:
        """An operation was removed from the store."""
        with self._lock:
            row = self._rows.pop(operation_id, None)
            if row is not None:
                self._order.pop(bisect_left(self._order, (row.start_time, operation_id)))
                self._finished -= row.final

    def ids(self, query: OperationFilter) -> list[str] | None:
        """The ids ``store.list_operation_ids(query)`` answers, or None when this order cannot tell (the page
        reaches below ``horizon``, a time bound is set, or more than ``WALK_LIMIT`` operations would be looked
        at)."""
        if query.from_time is not None or query.to_time is not None:
            return None
        wanted = query.limit
        cursor = query.cursor_time
        found: list[str] = []
        with self._lock:
            order, rows, horizon = self._order, self._rows, self.horizon
            if query.cursor_direction == "past":
                position = len(order) if cursor is None else bisect_left(order, (float(cursor),))
                steps = range(position - 1, -1, -1)
            else:
                if cursor is None:
                    if horizon != -math.inf:
                        return None
                    position = 0
                else:
                    if float(cursor) < horizon:
                        return None
                    position = bisect_left(order, (math.nextafter(float(cursor), math.inf),))
                steps = range(position, len(order))
            if len(steps) > WALK_LIMIT:
                steps = steps[:WALK_LIMIT]
                walked_all = False
            else:
                walked_all = True
            for index in steps:
                if len(found) >= wanted:
                    return found
                start_time, operation_id = order[index]
                if start_time <= horizon:
                    return None
                row = rows[operation_id]
                if (
                    row.stored
                    and (query.state is None or row.state == query.state)
                    and (query.user is None or row.user == query.user)
                    and (query.pool is None or row.pool == query.pool)
                    and (query.type is None or row.type == query.type)
                ):
                    found.append(operation_id)
            if len(found) >= wanted:
                return found
            if not walked_all or (query.cursor_direction == "past" and horizon != -math.inf):
                return None
            return found

    def _trim(self) -> None:
        """Drop the oldest finished operations past ``FINISHED_KEPT`` (lock held), raising ``horizon`` to the
        newest start time dropped: a page never reaches below it from here."""
        if self._finished <= FINISHED_KEPT:
            return
        excess = self._finished - FINISHED_KEPT // 2  # drop in bulk: one pass per FINISHED_KEPT / 2 finishes
        kept: list[tuple[float, str]] = []
        for key in self._order:
            row = self._rows[key[1]]
            if excess > 0 and row.final:
                excess -= 1
                self._finished -= 1
                self.horizon = max(self.horizon, key[0])
                del self._rows[key[1]]
                continue
            kept.append(key)
        # what is left at or below the horizon is kept (live ones are), but pages do not read there
        self._order = kept
