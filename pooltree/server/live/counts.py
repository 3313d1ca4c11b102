"""Operation counters for ``list_operations``: how many operations there are per (state, user, pools, type,
has failed jobs), kept in memory beside the store so a listing never counts rows.

``OperationCounts`` is loaded once from the store at start (one pass) and then follows every operation record the
scheduler writes (``put``); so does its ``pages``, the order a listing's page is taken in (``pages.py``). The counters of a listing are computed from these few groups, as YTsaurus does
(``TListOperationsCountingFilter``): each counter counts the operations that pass every filter except its own
dimension, and an operation failing two or more filters counts nowhere.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pooltree.server.live.pages import PageOrder
from pooltree.server.store import OperationRecord


@dataclass(frozen=True, slots=True)
class CountKey:
    """The attributes of an operation the counters group by."""

    state: str
    user: str
    pools: tuple[str, ...]
    type: str
    has_failed_jobs: bool


def count_key(record: OperationRecord) -> CountKey:
    """The group of a stored operation: its pools in every tree (``document.pools``, else the pool column)."""
    doc = record.document
    pools_by_tree = doc.get("pools") if isinstance(doc.get("pools"), dict) else {}
    pools = tuple(sorted({str(p) for p in pools_by_tree.values() if p}))
    if not pools and record.pool:
        pools = (record.pool,)
    progress = doc.get("progress") if isinstance(doc.get("progress"), dict) else {}
    failed = progress.get("failed") or doc.get("failed_job_count") or 0
    return CountKey(record.state, record.user, pools, record.type, bool(failed))


@dataclass(frozen=True)
class CountFilter:
    """The filters of a listing that have counters (``None``: not filtered)."""

    state: str | None = None
    user: str | None = None
    pool: str | None = None
    type: str | None = None
    with_failed_jobs: bool | None = None


def empty_counters() -> dict[str, Any]:
    return {
        "pool_counts": {},
        "user_counts": {},
        "state_counts": {},
        "type_counts": {},
        "failed_jobs_count": 0,
    }


def counters(groups: Iterable[tuple[CountKey, int]], query: CountFilter) -> dict[str, Any]:
    """``pool_counts``, ``user_counts``, ``state_counts``, ``type_counts`` and ``failed_jobs_count`` of ``groups``
    under ``query``: a counter counts the operations failing no filter but possibly its own."""
    pool_counts: Counter[str] = Counter()
    user_counts: Counter[str] = Counter()
    state_counts: Counter[str] = Counter()
    type_counts: Counter[str] = Counter()
    failed_jobs = 0
    for key, count in groups:
        if count <= 0:
            continue
        failing = []
        if query.pool is not None and query.pool not in key.pools:
            failing.append("pool")
        if query.user is not None and query.user != key.user:
            failing.append("user")
        if query.state is not None and query.state != key.state:
            failing.append("state")
        if query.type is not None and query.type != key.type:
            failing.append("type")
        if query.with_failed_jobs is not None and query.with_failed_jobs != key.has_failed_jobs:
            failing.append("failed")
        if len(failing) > 1:
            continue
        only = failing[0] if failing else None
        if only in (None, "pool"):
            for pool in key.pools:
                pool_counts[pool] += count
        if only in (None, "user"):
            user_counts[key.user] += count
        if only in (None, "state"):
            state_counts[key.state] += count
        if only in (None, "type"):
            type_counts[key.type] += count
        if only in (None, "failed") and key.has_failed_jobs:
            failed_jobs += count
    return {
        "pool_counts": dict(pool_counts),
        "user_counts": dict(user_counts),
        "state_counts": dict(state_counts),
        "type_counts": dict(type_counts),
        "failed_jobs_count": failed_jobs,
    }


class OperationCounts:
    """Operations per ``CountKey`` for every operation in the store; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: Counter[CountKey] = Counter()
        self._keys: dict[str, CountKey] = {}
        """Operation id → its current group, for the operations this scheduler may still write."""
        self.loaded = False
        self.pages = PageOrder()
        """Which operations a listing's page holds, without a store query (``pages.py``)."""

    def load(self, records: Iterable[OperationRecord], *, final_states: Iterable[str] = ()) -> None:
        """Count every stored operation (replacing what was counted). Operations in ``final_states`` are counted
        but not remembered by id (they are not written again)."""
        final = set(final_states)
        groups: Counter[CountKey] = Counter()
        keys: dict[str, CountKey] = {}
        records = list(records)
        self.pages.load(records, final_states=final)
        for record in records:
            key = count_key(record)
            groups[key] += 1
            if record.state not in final:
                keys[record.id] = key
        with self._lock:
            self._groups = groups
            self._keys = keys
            self.loaded = True

    def put(self, record: OperationRecord, *, final: bool = False, stored: bool = True) -> None:
        """An operation was written: move it to its new group (``final``: it will not be written again;
        ``stored`` False: queued for the group commit, listed on pages once ``stored`` is called)."""
        self.pages.put(record, final=final, stored=stored)
        key = count_key(record)
        with self._lock:
            old = self._keys.pop(record.id, None)
            if old is not None:
                self._groups[old] -= 1
                if self._groups[old] <= 0:
                    del self._groups[old]
            self._groups[key] += 1
            if not final:
                self._keys[record.id] = key

    def stored(self, operation_id: str) -> None:
        """A started operation's queued first record is stored: pages list it from now on."""
        self.pages.stored(operation_id)

    def forget(self, operation_id: str, record: OperationRecord | None) -> None:
        """An operation was removed from the store (``record`` as it was, when not remembered by id)."""
        self.pages.forget(operation_id)
        with self._lock:
            key = self._keys.pop(operation_id, None)
            if key is None and record is not None:
                key = count_key(record)
            if key is not None and self._groups.get(key, 0) > 0:
                self._groups[key] -= 1
                if self._groups[key] <= 0:
                    del self._groups[key]

    def groups(self) -> list[tuple[CountKey, int]]:
        with self._lock:
            return list(self._groups.items())

    def counters(self, query: CountFilter) -> dict[str, Any]:
        return counters(self.groups(), query)
